package sink

import (
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Publish is the relay sink: it publishes toMsg(m) for each received
// message with up to parallelism publishes outstanding, and acks m only
// after its publish succeeded (nacks it when the publish failed), so a
// subscribe → transform → publish pipeline never loses a message. It is
// publisher.Forward; use publisher.Stage for the flow form that emits each
// publish's outcome.
func Publish(p *publisher.Publisher, toMsg func(*message.Message) *publisher.Message, parallelism int) stage.Sink[*message.Message] {
	return publisher.Forward(p, toMsg, parallelism)
}
