package publisher

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
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

// encodedSize is the size of m encoded as a PubsubMessage (what
// proto.Size returns for the message fill builds), counted field by field:
// proto.Size would cost a walk of the message's descriptor per message.
// Empty scalar fields are not encoded; a map entry always encodes its key
// and value.
func (m *Message) encodedSize() int {
	n := 0
	if len(m.Data) > 0 {
		n += 1 + protowire.SizeBytes(len(m.Data)) // field 1
	}
	for k, v := range m.Attributes { // field 2: entries {1: key, 2: value}
		n += 1 + protowire.SizeBytes(1+protowire.SizeBytes(len(k))+1+protowire.SizeBytes(len(v)))
	}
	if len(m.OrderingKey) > 0 {
		n += 1 + protowire.SizeBytes(len(m.OrderingKey)) // field 5
	}
	return n
}

// fill sets the wire message pm (zero, in a batch's slab) to m.
func (m *Message) fill(pm *pubsubpb.PubsubMessage) {
	pm.Data, pm.Attributes, pm.OrderingKey = m.Data, m.Attributes, m.OrderingKey
}

// fieldBytes is the encoded size of a length-delimited field with a
// one-byte tag (PublishRequest fields 1 and 2) and n bytes of payload.
func fieldBytes(n int) int { return 1 + protowire.SizeBytes(n) }
