package carrier

import (
	"context"
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestAppendWire: the wire entries, set as a message's unknown fields,
// decode as the attributes propagation.TraceContext would have written
// into a copy of the message's own, next to them, and WireSize counts
// them.
func TestAppendWire(t *testing.T) {
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sid := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	ts, err := trace.ParseTraceState("vendor=value,other=x")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]trace.SpanContext{
		"sampled":    trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
		"unsampled":  trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}),
		"odd flags":  trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 0xff}),
		"tracestate": trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}),
		"invalid":    {},
	}
	for name, sc := range cases {
		t.Run(name, func(t *testing.T) {
			own := map[string]string{"k": "v"}
			want := maps.Clone(own)
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), Carrier(want))

			raw := AppendWire(nil, sc)
			if len(raw) != WireSize(sc) {
				t.Fatalf("AppendWire wrote %d bytes, WireSize says %d", len(raw), WireSize(sc))
			}
			pm := &pubsubpb.PubsubMessage{Data: []byte("d"), Attributes: own}
			pm.ProtoReflect().SetUnknown(protoreflect.RawFields(raw))
			b, err := proto.Marshal(pm)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != proto.Size(pm) {
				t.Fatalf("proto.Size %d, encoded %d", proto.Size(pm), len(b))
			}
			var got pubsubpb.PubsubMessage
			if err := proto.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Attributes, want) {
				t.Fatalf("decoded attributes %v, want %v", got.Attributes, want)
			}
			if len(own) != 1 {
				t.Fatalf("the message's own attributes changed: %v", own)
			}
		})
	}
}

// TestAppendTraceParentMatchesPropagator: for random ids and every flags
// byte, AppendTraceParent writes exactly what propagation.TraceContext
// injects, after whatever dst already holds.
func TestAppendTraceParentMatchesPropagator(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for f := range 256 {
		var tid trace.TraceID
		var sid trace.SpanID
		binary.LittleEndian.PutUint64(tid[:8], r.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], r.Uint64()|1) // valid: not all zero
		binary.LittleEndian.PutUint64(sid[:], r.Uint64()|1)
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(f)})
		want := map[string]string{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), Carrier(want))
		got := AppendTraceParent([]byte("x"), sc)
		if string(got) != "x"+want[TraceParentKey] {
			t.Fatalf("flags %#02x: %q, want %q", f, got[1:], want[TraceParentKey])
		}
	}
}

// TestAppendWireAllocs: writing a trace context without a trace state
// into a buffer with room allocates nothing.
func TestAppendWireAllocs(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = AppendWire(buf[:0], sc) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkAppendWire(b *testing.B) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	buf := make([]byte, 0, 256)
	for b.Loop() {
		buf = AppendWire(buf[:0], sc)
	}
}
