package sink

import (
	"github.com/pubsubflow/pubsubflow/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Acknowledge returns the sink that ends a subscriber pipeline. A message
// that reaches it unsettled was processed successfully: it gets
// p.OnSuccess (ack by default). A message already settled (the handler
// acked or nacked it, or Apply ran) is left as it is. The settling itself
// — permits, lease, the batched RPC — is done by the message's bound
// Settler, so the sink never blocks on an RPC.
//
// Run returns nil when its input closes, the context's error when the
// group is cancelled first, or p's validation error.
func Acknowledge(p Policy) stage.Sink[*message.Message] {
	return stage.SinkFunc[*message.Message](func(g *stage.Group, in <-chan *message.Message) error {
		if err := p.Validate(); err != nil {
			return err
		}
		o := p.success()
		ctx := g.Context()
		for {
			select {
			case m, ok := <-in:
				if !ok {
					return nil
				}
				if !m.Settled() {
					m.Settle(o, p.NackDelay)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
}
