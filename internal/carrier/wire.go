package carrier

import (
	"slices"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The W3C trace-context keys as a message carries them.
const (
	TraceParentKey = Prefix + "traceparent"
	TraceStateKey  = Prefix + "tracestate"
)

// traceParentLen is the length of a version-00 traceparent value:
// "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>".
const traceParentLen = 2 + 1 + 32 + 1 + 16 + 1 + 2

// AppendTraceParent appends the W3C traceparent value of sc to dst, as
// propagation.TraceContext writes it (only the sampled and random flags
// are carried). sc must be valid.
//
// It runs for every traced message, sampled or not, so it writes the 55
// bytes in place, a byte's two hex digits at a time from hexPairs (about
// half the time of encoding/hex here), with no intermediate string or
// buffer: dst grows at most once, and not at all when it has room.
func AppendTraceParent(dst []byte, sc trace.SpanContext) []byte {
	n := len(dst)
	dst = slices.Grow(dst, traceParentLen)[:n+traceParentLen]
	v := (*[traceParentLen]byte)(dst[n:])
	tid, sid := sc.TraceID(), sc.SpanID()
	v[0], v[1], v[2] = '0', '0', '-' // version 00
	for i, c := range tid {
		*(*[2]byte)(v[3+2*i:]) = hexPairs[c]
	}
	v[35] = '-'
	for i, c := range sid {
		*(*[2]byte)(v[36+2*i:]) = hexPairs[c]
	}
	v[52] = '-'
	*(*[2]byte)(v[53:]) = hexPairs[byte(sc.TraceFlags()&(trace.FlagsSampled|trace.FlagsRandom))]
	return dst
}

// hexPairs holds every byte's two lower-case hex digits, as W3C trace
// context writes them.
var hexPairs = func() (t [256][2]byte) {
	const digits = "0123456789abcdef"
	for i := range t {
		t[i] = [2]byte{digits[i>>4], digits[i&0xf]}
	}
	return t
}()

// attributesField is the field number of PubsubMessage.attributes, a
// map<string, string>: on the wire, one length-delimited entry {1: key,
// 2: value} per attribute, in any order and next to any other entries.
const attributesField = 2

// WireSize is the number of bytes AppendWire appends for sc: 0 when sc is
// not valid (nothing is carried).
func WireSize(sc trace.SpanContext) int {
	if !sc.IsValid() {
		return 0
	}
	n := entrySize(len(TraceParentKey), traceParentLen)
	if sc.TraceState().Len() > 0 {
		n += entrySize(len(TraceStateKey), len(sc.TraceState().String()))
	}
	return n
}

// AppendWire appends the trace context of sc to dst as PubsubMessage
// attribute entries in wire format ("googclient_traceparent" and, when sc
// has a trace state, "googclient_tracestate"): bytes that, set as a wire
// message's unknown fields, reach the server as those attributes, without
// a map of attributes being copied or built for them. It appends nothing
// when sc is not valid. Unknown fields are encoded after the message's
// known ones and a parser keeps the last entry of a duplicated map key, so
// these entries win over the same keys in the message's own attributes,
// as an injection into a copy of them would.
func AppendWire(dst []byte, sc trace.SpanContext) []byte {
	if !sc.IsValid() {
		return dst
	}
	if ts := sc.TraceState(); ts.Len() > 0 {
		dst = appendEntryHeader(dst, TraceStateKey, len(ts.String()))
		dst = append(dst, ts.String()...)
	}
	dst = append(dst, traceParentHeader...)
	return AppendTraceParent(dst, sc)
}

// traceParentHeader is the constant start of the traceparent entry: its
// tag and length, the key field, the value's tag and length.
var traceParentHeader = appendEntryHeader(nil, TraceParentKey, traceParentLen)

// entrySize is the encoded size of one map entry with a key and value of
// these lengths, tag included.
func entrySize(keyLen, valueLen int) int {
	n := 1 + protowire.SizeBytes(keyLen) + 1 + protowire.SizeBytes(valueLen)
	return protowire.SizeTag(attributesField) + protowire.SizeBytes(n)
}

// appendEntryHeader appends a map entry's tag and length, then its key
// field and the value field's tag and length: the value's bytes follow.
func appendEntryHeader(dst []byte, key string, valueLen int) []byte {
	n := 1 + protowire.SizeBytes(len(key)) + 1 + protowire.SizeBytes(valueLen)
	dst = protowire.AppendTag(dst, attributesField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(n))
	dst = protowire.AppendTag(dst, 1, protowire.BytesType)
	dst = protowire.AppendString(dst, key)
	dst = protowire.AppendTag(dst, 2, protowire.BytesType)
	return protowire.AppendVarint(dst, uint64(valueLen))
}
