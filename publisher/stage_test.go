package publisher

import (
	"context"
	"errors"
	"testing"

	"github.com/pubsubflow/pubsubflow/pipeline"
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
