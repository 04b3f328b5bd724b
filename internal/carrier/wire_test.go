package carrier

import (
	"context"
	"maps"
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
