//go:build !race

package publisher

import (
	"context"
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
