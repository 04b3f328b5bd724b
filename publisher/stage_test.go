package publisher

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/source"
)

// The stage emits one Outcome per element, in input order, each after its
// publish settled; a nil conversion is an error outcome, not a publish.
func TestStageEmitsOutcomesInOrder(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(t, Config{})
	const n = 500
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	toMsg := func(i int) *Message {
		if i == 7 {
			return nil
		}
		return msg(i)
	}
	var got []Outcome[int]
	err := pipeline.Map(pipeline.From(pipeline.Slice(in...)), Stage(p, toMsg, 64)).
		To(pipeline.ForEach(func(_ context.Context, o Outcome[int]) error {
			got = append(got, o)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d outcomes", len(got))
	}
	for i, o := range got {
		if o.In != i {
			t.Fatalf("outcome %d is for element %d", i, o.In)
		}
		if i == 7 {
			if !errors.Is(o.Err, ErrInvalidMessage) {
				t.Fatalf("nil message: %v", o.Err)
			}
			continue
		}
		if o.Err != nil || o.ID == "" {
			t.Fatalf("element %d: %q %v", i, o.ID, o.Err)
		}
	}
	if got := e.srv.SubscriptionStats(e.sub).Published; got != n-1 {
		t.Fatalf("server has %d messages", got)
	}
}

// Forward acks an input only after its publish succeeded and nacks the
// inputs whose publish failed.
func TestForwardAcksAfterPublishNacksOnFailure(t *testing.T) {
	e := newEnv(t)
	e.srv.FailNext("Publish", 1, codes.PermissionDenied)
	// One message per batch and one in flight: exactly the first fails.
	p := e.publisher(t, Config{MaxMessages: 1, MaxInFlightBatches: 1})
	var msgs []*source.Message
	for i := range 20 {
		msgs = append(msgs, &source.Message{ID: string(rune('a' + i)), Data: []byte{byte('a' + i)}})
	}
	var fails int
	toMsg := func(m *source.Message) *Message {
		if m.Settled() {
			fails++ // acked or nacked before its publish settled
		}
		return &Message{Data: m.Data}
	}
	if err := pipeline.From(pipeline.Slice(msgs...)).To(Forward(p, toMsg, 8)); err != nil {
		t.Fatal(err)
	}
	if fails != 0 {
		t.Fatalf("%d inputs settled before publishing", fails)
	}
	if o := msgs[0].Outcome(); o != source.Nack {
		t.Fatalf("the input whose publish failed was %v, want nack", o)
	}
	for _, m := range msgs[1:] {
		if m.Outcome() != source.Ack {
			t.Fatalf("input %s was %v, want ack", m.ID, m.Outcome())
		}
	}
	if got := e.srv.SubscriptionStats(e.sub).Published; got != 19 {
		t.Fatalf("server has %d messages", got)
	}
	if e.srv.MethodStats("Publish").Injected != 1 {
		t.Fatal("the fault was not injected")
	}
}
