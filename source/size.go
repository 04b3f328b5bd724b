package source

import (
	"reflect"
	"unsafe"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// protoSize is proto.Size(rm.GetMessage()), the size the service counts
// against max_outstanding_bytes, worked out from the fields (each takes a
// one-byte tag) at a fraction of the generic walk's cost. TestProtoSize
// checks it against proto.Size.
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
		t := unknownTS.size(unsafe.Pointer(ts), ts)
		if ts.Seconds != 0 {
			t += 1 + protowire.SizeVarint(uint64(ts.Seconds))
		}
		if ts.Nanos != 0 {
			t += 1 + protowire.SizeVarint(uint64(ts.Nanos))
		}
		n += 1 + protowire.SizeBytes(t)
	}
	return n + unknownPM.size(unsafe.Pointer(pm), pm)
}

// unknownAt reads a generated message's unknownFields field at its offset
// (found once by reflection): a load, where ProtoReflect().GetUnknown()
// costs several times the rest of protoSize. Not found: GetUnknown.
type unknownAt struct {
	off uintptr
	ok  bool
}

var (
	unknownPM = unknownOffset(reflect.TypeFor[pubsubpb.PubsubMessage]())
	unknownTS = unknownOffset(reflect.TypeFor[timestamppb.Timestamp]())
)

func unknownOffset(t reflect.Type) unknownAt {
	f, ok := t.FieldByName("unknownFields")
	if !ok || f.Type.Kind() != reflect.Slice || f.Type.Elem().Kind() != reflect.Uint8 {
		return unknownAt{}
	}
	return unknownAt{off: f.Offset, ok: true}
}

// size is len(m.ProtoReflect().GetUnknown()) for the message at p.
func (u unknownAt) size(p unsafe.Pointer, m proto.Message) int {
	if !u.ok {
		return len(m.ProtoReflect().GetUnknown())
	}
	return len(*(*[]byte)(unsafe.Add(p, u.off)))
}

// bytesField is the encoded size of a proto3 string or bytes field.
func bytesField(l int) int {
	if l == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(l)
}
