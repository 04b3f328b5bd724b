package pubsubflow_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// Forward acks an input only after its publish succeeded and nacks the
// inputs whose publish failed.
func TestForwardAcksAfterPublishNacksOnFailure(t *testing.T) {
	f := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: 60 * time.Second})
	f.Server.FailNext("Publish", 1, codes.PermissionDenied)
	// One message per batch and one in flight: exactly the first fails.
	p, err := publisher.New(f.Server.ClientConn(), f.Topic, publisher.Config{MaxMessages: 1, MaxInFlightBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []*pubsubflow.Message
	for i := range 20 {
		msgs = append(msgs, &pubsubflow.Message{ID: string(rune('a' + i)), Data: []byte{byte('a' + i)}})
	}
	var early int
	toMsg := func(m *pubsubflow.Message) *publisher.Message {
		if m.Settled() {
			early++ // acked or nacked before its publish settled
		}
		return &publisher.Message{Data: m.Data}
	}
	if err := pipeline.From(pipeline.Slice(msgs...)).To(pubsubflow.Forward(p, toMsg, 8)); err != nil {
		t.Fatal(err)
	}
	if early != 0 {
		t.Fatalf("%d inputs settled before publishing", early)
	}
	if o := msgs[0].Outcome(); o != pubsubflow.Nack {
		t.Fatalf("the input whose publish failed was %v, want nack", o)
	}
	for _, m := range msgs[1:] {
		if m.Outcome() != pubsubflow.Ack {
			t.Fatalf("input %s was %v, want ack", m.ID, m.Outcome())
		}
	}
	if got := f.Server.SubscriptionStats(f.Sub).Published; got != 19 {
		t.Fatalf("server has %d messages", got)
	}
	if f.Server.MethodStats("Publish").Injected != 1 {
		t.Fatal("the fault was not injected")
	}
}
