package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

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
		// The messages runEmbedded publishes: every third an order, one
		// order in a hundred malformed, the rest views and clicks.
		Message: func(i int) *pubsubpb.PubsubMessage {
			m := &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i)), Attributes: map[string]string{"kind": "click"}}
			switch {
			case i%300 == 0:
				m.Attributes["kind"], m.Data = "order", []byte("not a number")
			case i%3 == 0:
				m.Attributes["kind"] = "order"
			case i%2 == 0:
				m.Attributes["kind"] = "view"
			}
			return m
		},
		MaxLatency: time.Minute,
	})
}
