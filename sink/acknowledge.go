package sink

import (
	"context"

	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Acknowledge returns the sink that ends a subscriber pipeline. A message
// that reaches it unsettled was processed successfully: it gets
// p.OnSuccess (ack by default). A message already settled (the handler
// acked or nacked it, or Apply ran) is left as it is. The settling itself
// — permits, lease, the batched RPC — is done by the message's own settle
// path, owned by the source that received it, so the sink never blocks on
// an RPC.
//
// Run returns nil when its input closes, the context's error when the
// group is cancelled first, or p's validation error.
func Acknowledge(p Policy) stage.Sink[*source.Message] { return ackSink{p} }

// ackSink is Acknowledge: a stage.Sink and a stage.BatchSink.
type ackSink struct{ p Policy }

// The batch path is what makes Acknowledge cheap; keep it compiled in.
var _ stage.BatchSink[*source.Message] = ackSink{}

func (a ackSink) Run(g *stage.Group, in <-chan *source.Message) error {
	return a.run(g, func(ctx context.Context) (bool, error) {
		select {
		case m, ok := <-in:
			if ok {
				a.settle(m)
			}
			return ok, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	})
}

func (a ackSink) RunBatches(g *stage.Group, in <-chan []*source.Message) error {
	return a.run(g, func(ctx context.Context) (bool, error) {
		select {
		case b, ok := <-in:
			for _, m := range b {
				a.settle(m)
			}
			return ok, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	})
}

// run validates the policy, then calls next until it reports the end.
func (a ackSink) run(g *stage.Group, next func(ctx context.Context) (bool, error)) error {
	if err := a.p.Validate(); err != nil {
		return err
	}
	ctx := g.Context()
	for {
		if more, err := next(ctx); !more {
			return err
		}
	}
}

func (a ackSink) settle(m *source.Message) {
	if !m.Settled() {
		Settle(m, a.p.success(), a.p.NackDelay)
	}
}
