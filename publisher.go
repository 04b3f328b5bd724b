package pubsubflow

import (
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/publisher"
)

// Publisher publishes to one topic with a batching worker, ordering keys
// with pause and resume, and flow control; see publisher.Publisher.
type Publisher = publisher.Publisher

// PublisherConfig configures a Publisher; the zero value means the
// documented defaults (batches of 100 messages, 1 MB or 10 ms).
type PublisherConfig = publisher.Config

// OutgoingMessage is a message to publish.
type OutgoingMessage = publisher.Message

// NewPublisher returns a Publisher for topic (projects/P/topics/T) over
// conn, for example a connection from connect.Dial or a pubsubtest server.
func NewPublisher(conn grpc.ClientConnInterface, topic string, cfg PublisherConfig) (*Publisher, error) {
	return publisher.New(conn, topic, cfg)
}
