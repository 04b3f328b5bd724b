package sink

import (
	"context"
	"errors"
	"testing"

	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestAcknowledgeAppliesOnSuccess: unsettled messages get OnSuccess,
// settled ones keep their outcome.
func TestAcknowledgeAppliesOnSuccess(t *testing.T) {
	in := make(chan *source.Message, 3)
	a, b, c := newMsg("a", 1), newMsg("b", 1), newMsg("c", 1)
	b.Nack()
	c.NoOp()
	in <- a
	in <- b
	in <- c
	close(in)
	g := stage.NewGroup(context.Background())
	if err := Acknowledge(Policy{}).Run(g, in); err != nil {
		t.Fatal(err)
	}
	if a.Outcome() != source.Ack || b.Outcome() != source.Nack || c.Outcome() != source.NoOp {
		t.Fatalf("outcomes %v %v %v", a.Outcome(), b.Outcome(), c.Outcome())
	}
}

func TestAcknowledgePolicy(t *testing.T) {
	in := make(chan *source.Message, 1)
	m := newMsg("a", 1)
	in <- m
	close(in)
	g := stage.NewGroup(context.Background())
	if err := Acknowledge(Policy{OnSuccess: source.NoOp}).Run(g, in); err != nil {
		t.Fatal(err)
	}
	if m.Outcome() != source.NoOp {
		t.Fatalf("outcome %v, want no-op", m.Outcome())
	}
	if err := Acknowledge(Policy{OnSuccess: source.Expired}).Run(g, in); err == nil {
		t.Fatal("an invalid policy was accepted")
	}
}

func TestAcknowledgeCancelled(t *testing.T) {
	g := stage.NewGroup(context.Background())
	g.Cancel()
	if err := Acknowledge(Policy{}).Run(g, make(chan *source.Message)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}
