package pubsubflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/proptest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestStreamsOperatorsCheckTopology: a go-streams Filter, Batch and
// window inside Streams pass the state machine: what the Filter drops is
// settled Hold after it went in (Ack: not wanted), and what a Batch or a
// window holds comes out flattened, well within the default Hold. The
// Filter holds nothing on purpose, so its graph gets a short Hold, as the
// doc advises: with the default (a minute) and a budget of one message,
// it settles one dropped message a minute, slower than the machine's
// quiet phase allows.
func TestStreamsOperatorsCheckTopology(t *testing.T) {
	graphs := map[string]struct {
		build func(in streams.Source) streams.Outlet
		opt   pubsubflow.StreamsOptions
	}{
		"Filter": {func(in streams.Source) streams.Outlet {
			return in.Via(gsflow.NewFilter(func(m *pubsubflow.Message) bool { return len(m.Data)%2 == 0 }, 2))
		}, pubsubflow.StreamsOptions{Hold: 2 * time.Second, Lost: pubsubflow.Ack}},
		"Batch": {func(in streams.Source) streams.Outlet {
			return in.Via(gsflow.NewBatch[*pubsubflow.Message](8, time.Second)).Via(gsflow.Flatten[*pubsubflow.Message](1))
		}, pubsubflow.StreamsOptions{}},
		"TumblingWindow": {func(in streams.Source) streams.Outlet {
			return in.Via(gsflow.NewTumblingWindow[*pubsubflow.Message](2 * time.Second)).Via(gsflow.Flatten[*pubsubflow.Message](1))
		}, pubsubflow.StreamsOptions{}},
	}
	for name, g := range graphs {
		t.Run(name, func(t *testing.T) {
			proptest.CheckTopology(t, func(ctx context.Context, env *proptest.Env) error {
				f := pubsubflow.Streams(func(_ *stage.Group, in streams.Source) streams.Outlet { return g.build(in) },
					g.opt)
				return env.From(ctx).Via(f).To(env.Acknowledge())
			}, proptest.Options{Checks: 30})
		})
	}
}
