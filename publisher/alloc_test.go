//go:build !race

package publisher

import (
	"context"
	"runtime"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestPublishAllocs: an untraced Publish allocates nothing of its own per
// message: its wire message and Result come from per-batch slabs, so what
// is left is the batch's share (a few allocations per 100 messages; the
// test's client allocates only its response). A message whose trace is
// not sampled adds only the tracing SDK's Start (its span and context:
// 2 in the SDK this module uses) and no attribute map. AllocsPerRun
// rounds down: 0 is less than one per Publish on average. (Not under
// -race, which allocates on its own.)
func TestPublishAllocs(t *testing.T) {
	cases := []struct {
		name string
		tp   trace.TracerProvider
		max  float64
	}{
		{"untraced", nil, 0},
		{"unsampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())), 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewFromClient(newIDClient(100), "projects/proj/topics/topic", Config{TracerProvider: c.tp})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			m := &Message{Data: []byte("payload")}
			for range 1000 { // warm up: the keys' chunk sizes, the rings
				p.Publish(ctx, m)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			n := testing.AllocsPerRun(10_000, func() { p.Publish(ctx, m) })
			if n > c.max {
				t.Errorf("%.0f allocations per Publish, want at most %.0f", n, c.max)
			}
			t.Logf("%.0f allocations per Publish", n)
		})
	}
}

// TestPublishBytesUnsampled: what an unsampled message allocates beyond an
// untraced one is the tracing SDK's Start (its span and context, measured
// here by itself) and nothing of ours: its trace context is written into
// a chunk its batch's slab recycles, not one allocated a batch.
func TestPublishBytesUnsampled(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx := context.Background()
	tr := tp.Tracer(tracerName)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	start := bytesPer(1000, func() {
		_, s := tr.Start(ctx, "topic create", opts...)
		s.End()
	})
	per := map[string]float64{}
	for name, tp := range map[string]trace.TracerProvider{"untraced": nil, "unsampled": tp} {
		p, err := NewFromClient(newIDClient(100), "projects/proj/topics/topic", Config{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		m := &Message{Data: []byte("payload")}
		publish := func(n int) {
			for range n {
				p.Publish(ctx, m)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		publish(1000)                                            // warm up: the keys' chunk sizes, the rings, the slabs
		per[name] = bytesPer(200, func() { publish(100) }) / 100 // full batches
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if extra := per["unsampled"] - per["untraced"]; extra > start+16 {
		t.Errorf("an unsampled Publish allocates %.0f bytes more than an untraced one; the SDK's Start alone, %.0f", extra, start)
	}
	t.Logf("bytes per Publish: untraced %.0f, unsampled %.0f; the SDK's Start %.0f", per["untraced"], per["unsampled"], start)
}

// bytesPer is the bytes allocated per call of f, over n calls.
func bytesPer(n int, f func()) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
}
