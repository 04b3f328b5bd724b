package main

import (
	"context"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/proptest"
)

// The topology checked by the state machine: every message reaches one
// branch and is settled there or by the Acknowledge sink (malformed orders
// are nacked every time they come back), within a minute of its publish
// when nothing disturbs it; the library's invariants hold through
// restarts, stalls and failing RPCs.
func TestTopologyProperties(t *testing.T) {
	proptest.CheckTopology(t, func(ctx context.Context, env *proptest.Env) error {
		tp := &topology{events: map[string]int64{}}
		return env.From(ctx).Via(tp.flow()).To(env.Acknowledge())
	}, proptest.Options{
		Message:    sample, // the messages runEmbedded publishes
		MaxLatency: time.Minute,
	})
}
