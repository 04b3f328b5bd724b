package bench

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow"
)

// BenchmarkThroughputTraced is BenchmarkThroughput's client=ours with
// tracing on (SubscriberConfig.TracerProvider): "sampled" records every
// span (batched to an exporter that drops them, so what is measured is
// the spans' making, not a collector's I/O); "unsampled" samples none, so
// spans are made but not recorded (the trace context still flows to the
// handler). Compare with client=ours of BenchmarkThroughput (tracing
// unset):
//
//	go test -run '^$' -bench 'Throughput(Traced)?/payload=64B/outstanding=1000$/' -benchtime 100000x -count 6 ./bench/
func BenchmarkThroughputTraced(b *testing.B) {
	for _, payload := range []int{64, 1024} {
		for _, mode := range []string{"sampled", "unsampled"} {
			name := fmt.Sprintf("payload=%dB/outstanding=1000/tracing=%s", payload, mode)
			b.Run(name, func(b *testing.B) {
				sampler := sdktrace.AlwaysSample()
				if mode == "unsampled" {
					sampler = sdktrace.NeverSample()
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(dropSpans{}))
				defer tp.Shutdown(context.Background())
				c := client{name: "ours-traced", run: tracedOurs(tp)}
				benchThroughput(b, c, payload, settings{outstanding: 1000, streams: 1})
			})
		}
	}
}

// tracedOurs is runOurs with a tracer provider.
func tracedOurs(tp trace.TracerProvider) func(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
	return func(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
		cc := e.dial(tb)
		defer cc.Close()
		sub, err := pubsubflow.NewSubscriber(context.Background(), e.subscription(), pubsubflow.SubscriberConfig{
			Conn:                   cc,
			MaxOutstandingMessages: int64(s.outstanding),
			MaxOutstandingBytes:    byteBudget,
			Streams:                s.streams,
			TracerProvider:         tp,
		})
		if err != nil {
			return err
		}
		return sub.Run(ctx, ourParallelism, func(context.Context, *pubsubflow.Message) error {
			handled()
			return nil
		})
	}
}

// dropSpans is an exporter that discards what it is given.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }
