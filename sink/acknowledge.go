// Package sink holds the end of a subscriber pipeline.
//
// Acknowledge is the sink: a message that reaches it without an outcome
// was processed successfully and gets Policy's OnSuccess (ack by default);
// a message already settled is left as it is. Handlers report failure by
// settling the message (Apply, or m.Nack()).
//
// The sink sends nothing itself. Whatever ends a message — the sink's
// policy, a handler's Ack anywhere in the pipeline, lease expiry,
// shutdown — goes through its source's settle path, which gives back what
// every stage took for it and queues the ack or nack on the source's
// acknowledger (batched Acknowledge and ModifyAckDeadline RPCs with
// retry). So the sink can never be paired wrong, and a pipeline without it
// still releases everything.
package sink

import (
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Acknowledge returns the sink that ends a subscriber pipeline. A message
// that reaches it unsettled was processed successfully: it gets
// p.OnSuccess (ack by default); a settled one is left as it is. The sink
// never blocks on an RPC: the message's own settle path sends it.
//
// Run returns nil when its input closes, the context's error when the
// group is cancelled first, or p's validation error.
func Acknowledge(p Policy) stage.Sink[*source.Message] { return ackSink{p} }

// ackSink is Acknowledge: a stage.Sink and a stage.BatchSink.
type ackSink struct{ p Policy }

// The batch path is what makes Acknowledge cheap; keep it compiled in.
var _ stage.BatchSink[*source.Message] = ackSink{}

func (a ackSink) Run(g *stage.Group, in <-chan *source.Message) error {
	if err := a.p.Validate(); err != nil {
		return err
	}
	for {
		select {
		case m, ok := <-in:
			if !ok {
				return nil
			}
			a.settle(m)
		case <-g.Context().Done():
			return g.Context().Err()
		}
	}
}

func (a ackSink) RunBatches(g *stage.Group, in <-chan []*source.Message) error {
	if err := a.p.Validate(); err != nil {
		return err
	}
	for {
		select {
		case b, ok := <-in:
			if !ok {
				return nil
			}
			for _, m := range b {
				a.settle(m)
			}
		case <-g.Context().Done():
			return g.Context().Err()
		}
	}
}

func (a ackSink) settle(m *source.Message) {
	if !m.Settled() {
		Apply(m, nil, a.p)
	}
}
