package source

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// protoSize is the size flow control counts: the encoded PubsubMessage
// (data, attributes, ids, publish time), as the service counts it against
// a stream's max_outstanding_bytes, so the client's count and the
// server's agree. It is proto.Size(rm.GetMessage()), worked out from the
// fields (every field number of PubsubMessage and Timestamp takes a
// one-byte tag; a map entry always carries its key and value), which
// costs a fraction of the generic walk on the receive path.
// TestProtoSize checks it against proto.Size.
func protoSize(rm *pubsubpb.ReceivedMessage) int {
	pm := rm.GetMessage()
	if pm == nil {
		return 0
	}
	n := bytesField(len(pm.Data)) + bytesField(len(pm.MessageId)) + bytesField(len(pm.OrderingKey))
	for k, v := range pm.Attributes {
		n += 1 + protowire.SizeBytes(1+protowire.SizeBytes(len(k))+1+protowire.SizeBytes(len(v)))
	}
	if ts := pm.PublishTime; ts != nil {
		t := len(ts.ProtoReflect().GetUnknown())
		if ts.Seconds != 0 {
			t += 1 + protowire.SizeVarint(uint64(ts.Seconds))
		}
		if ts.Nanos != 0 {
			t += 1 + protowire.SizeVarint(uint64(ts.Nanos))
		}
		n += 1 + protowire.SizeBytes(t)
	}
	return n + len(pm.ProtoReflect().GetUnknown())
}

// bytesField is the encoded size of a proto3 string or bytes field of
// length l (absent when empty).
func bytesField(l int) int {
	if l == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(l)
}
