package main

import (
	"context"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/proptest"
)

// The topology checked by the state machine is run, the README's
// go-streams example: every message is settled once — a ping by the
// filter (acked as it is dropped), a malformed order by its branch
// (nacked every time it comes back), the rest by the Acknowledge sink
// after their branch — and none is dropped unsettled, or held by the
// window past its second; each is acked within a minute of its publish
// when nothing disturbs it; the library's invariants hold through
// restarts, stalls and failing RPCs.
func TestTopologyProperties(t *testing.T) {
	proptest.CheckTopology(t, func(ctx context.Context, env *proptest.Env) error {
		tp := &topology{events: map[string]int64{}}
		return tp.run(env.From(ctx), env.Acknowledge())
	}, proptest.Options{
		Message:    sample, // the messages runEmbedded publishes
		MaxLatency: time.Minute,
	})
}
