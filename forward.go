package pubsubflow

import (
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Forward returns a sink that publishes toMsg(m) for each received message
// m (from a Subscriber's Source) through p, via publisher.Stage, and
// settles m only after its publish settled: Ack when the publish
// succeeded, Nack when it failed, so the server redelivers the input. It
// is the end of a relay: subscribe → transform → Forward. parallelism
// bounds the publishes held unsettled (< 1 means 1000). The sink ends
// when its input closes and every publish has settled; it does not close
// p. When the group is cancelled first, inputs whose publish had not
// settled are left unsettled for their owner's shutdown path (a
// Subscriber nacks what is left), since their publish may still succeed.
func Forward(p *publisher.Publisher, toMsg func(*Message) *publisher.Message, parallelism int) stage.Sink[*Message] {
	publish := publisher.Stage(p, toMsg, parallelism)
	return stage.SinkFunc[*Message](func(g *stage.Group, in <-chan *Message) error {
		for o := range publish.Run(g, in) {
			if o.Err == nil {
				o.In.Ack()
			} else {
				o.In.Nack()
			}
		}
		return nil
	})
}
