package publisher

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkPublishTracing publishes 100-byte messages (b.N is the number
// of messages, so ns/op, B/op and allocs/op are per message) to a
// pubsubtest server over loopback, from one goroutine, with default
// batching: tracing "off" (Config.TracerProvider unset), "unsampled"
// (spans made, none recorded) and "sampled" (every span recorded and
// batched to an exporter that drops them).
//
//	go test -run '^$' -bench PublishTracing -benchtime 100000x -count 6 ./publisher/
func BenchmarkPublishTracing(b *testing.B) {
	for _, mode := range []string{"off", "unsampled", "sampled"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			var tp trace.TracerProvider
			if mode != "off" {
				sampler := sdktrace.AlwaysSample()
				if mode == "unsampled" {
					sampler = sdktrace.NeverSample()
				}
				stp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(dropSpans{}))
				defer stp.Shutdown(context.Background())
				tp = stp
			}
			srv, topic := benchServer(b)
			ctx := context.Background()
			p, err := New(srv.ClientConn(), topic, Config{TracerProvider: tp})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			data := make([]byte, 100)
			rs := make([]*Result, 0, 1000)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rs = append(rs, p.Publish(ctx, &Message{Data: data}))
				if len(rs) == cap(rs) || i == b.N-1 {
					for _, r := range rs {
						if _, err := r.Get(ctx); err != nil {
							b.Fatal(err)
						}
					}
					rs = rs[:0]
				}
			}
		})
	}
}

// dropSpans is an exporter that discards what it is given.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkSDKStartUnsampled is the floor of an unsampled message's
// tracing: the SDK's Tracer.Start (ids, the sampler, a span and a
// context) with the create span's name and options, under
// sdktrace.NeverSample, and End; nothing of the Publisher's.
//
//	go test -run '^$' -bench SDKStartUnsampled ./publisher/
func BenchmarkSDKStartUnsampled(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t := newPubTracer(tp, "projects/proj/topics/topic")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, s := t.tr.Start(ctx, t.createName, t.createOpts...)
		s.End()
	}
}
