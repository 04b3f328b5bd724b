package publisher

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Message is a message to publish. The Publisher keeps references to Data
// and Attributes until the message's Result settles: do not modify them
// before then.
type Message struct {
	Data       []byte
	Attributes map[string]string
	// OrderingKey, if set, requires Config.EnableOrdering: messages with
	// the same key are delivered in Publish order on subscriptions with
	// ordering enabled.
	OrderingKey string
}

// toProto builds the wire message and returns it with its encoded size and
// the bytes it adds to a PublishRequest (field tag and length included).
func (m *Message) toProto() (pm *pubsubpb.PubsubMessage, size, reqBytes int) {
	pm = &pubsubpb.PubsubMessage{Data: m.Data, Attributes: m.Attributes, OrderingKey: m.OrderingKey}
	size = proto.Size(pm)
	return pm, size, fieldBytes(size)
}

// fieldBytes is the encoded size of a length-delimited field with a
// one-byte tag (PublishRequest fields 1 and 2) and n bytes of payload.
func fieldBytes(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }
