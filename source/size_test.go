package source

import (
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"
)

// TestProtoSize: the hand-worked size equals proto.Size for any message:
// empty and long fields, attributes with empty keys or values, a publish
// time with zero seconds or nanos (negative ones too), unknown fields.
func TestProtoSize(t *testing.T) {
	if got := protoSize(&pubsubpb.ReceivedMessage{}); got != 0 {
		t.Fatalf("no message: %d", got)
	}
	rapid.Check(t, func(rt *rapid.T) {
		str := func(name string) string {
			return strings.Repeat("x", rapid.IntRange(0, 300).Draw(rt, name+"-len"))
		}
		pm := &pubsubpb.PubsubMessage{
			Data:        []byte(str("data")),
			MessageId:   str("id"),
			OrderingKey: str("key"),
		}
		if rapid.Bool().Draw(rt, "data-20k") {
			pm.Data = make([]byte, 20000)
		}
		for i := range rapid.IntRange(0, 5).Draw(rt, "attrs") {
			if pm.Attributes == nil {
				pm.Attributes = map[string]string{}
			}
			pm.Attributes[str("k")+string(rune('a'+i))] = str("v")
		}
		if rapid.Bool().Draw(rt, "time") {
			pm.PublishTime = &timestamppb.Timestamp{
				Seconds: rapid.Int64Range(-1<<40, 1<<40).Draw(rt, "sec"),
				Nanos:   rapid.Int32Range(-999999999, 999999999).Draw(rt, "nanos"),
			}
			if rapid.Bool().Draw(rt, "time-unknown") {
				pm.PublishTime.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7))
			}
		}
		if rapid.Bool().Draw(rt, "unknown") {
			pm.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), str("u")))
		}
		if got, want := protoSize(&pubsubpb.ReceivedMessage{Message: pm}), proto.Size(pm); got != want {
			rt.Fatalf("protoSize %d, proto.Size %d for %v", got, want, pm)
		}
	})
}

func BenchmarkProtoSize(b *testing.B) {
	rms := make([]*pubsubpb.ReceivedMessage, 1000)
	for i := range rms {
		rms[i] = &pubsubpb.ReceivedMessage{AckId: "ack", Message: &pubsubpb.PubsubMessage{MessageId: "123456", Data: make([]byte, 64), PublishTime: timestamppb.Now()}}
	}
	b.Run("hand", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_ = protoSize(rms[i%1000])
		}
	})
	b.Run("proto", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_ = proto.Size(rms[i%1000].Message)
		}
	})
	b.Run("nounknown", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			pm := rms[i%1000].Message
			n := bytesField(len(pm.Data)) + bytesField(len(pm.MessageId)) + bytesField(len(pm.OrderingKey))
			if ts := pm.PublishTime; ts != nil {
				n += 2 + 1 + protowire.SizeVarint(uint64(ts.Seconds)) + 1 + protowire.SizeVarint(uint64(ts.Nanos))
			}
			_ = n
		}
	})
}

// TestUnknownFieldsFound: the unknown fields of both message types are read
// straight from their field (not through the slower fallback).
func TestUnknownFieldsFound(t *testing.T) {
	if !unknownPM.ok || !unknownTS.ok {
		t.Fatalf("unknownFields not found: PubsubMessage %v, Timestamp %v", unknownPM.ok, unknownTS.ok)
	}
}
