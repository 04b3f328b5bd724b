package publisher

import (
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
)

// TestEncodedSize: the size the Publisher counts for batching and flow
// control is proto.Size of the wire message, for empty and long fields,
// empty attribute keys and values, and sizes around the varint steps.
func TestEncodedSize(t *testing.T) {
	long := strings.Repeat("x", 300)
	cases := []*Message{
		{},
		{Data: []byte("a")},
		{Data: make([]byte, 127)},
		{Data: make([]byte, 128)},
		{Data: make([]byte, 16383)},
		{Data: make([]byte, 16384)},
		{Data: make([]byte, 1<<21)},
		{Attributes: map[string]string{"k": ""}},
		{Attributes: map[string]string{"": "v"}},
		{Attributes: map[string]string{"k": long, long: "v", "é": "ü"}},
		{Data: []byte("d"), OrderingKey: "key"},
		{Data: []byte("d"), Attributes: map[string]string{"a": "b"}, OrderingKey: long},
	}
	for i, m := range cases {
		var pm pubsubpb.PubsubMessage
		m.fill(&pm)
		if got, want := m.encodedSize(), proto.Size(&pm); got != want {
			t.Errorf("case %d: encodedSize %d, proto.Size %d", i, got, want)
		}
	}
}
