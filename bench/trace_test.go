package bench

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pubsubflow/pubsubflow"
)

// BenchmarkThroughputTraced is BenchmarkThroughput (max outstanding 1,000,
// one stream) for our Subscriber and Google's client with tracing "off"
// (ours: SubscriberConfig.TracerProvider unset; Google's:
// EnableOpenTelemetryTracing false), "unsampled" (a provider with
// sdktrace.NeverSample: spans are started but record nothing) and
// "sampled" (sdktrace.AlwaysSample, spans batched to an exporter that
// drops them, so what is measured is the spans' making, not a collector's
// I/O). Google's client traces through the global provider, which the
// run sets for its duration. Every mode and client in one run:
//
//	go test -run '^$' -bench 'ThroughputTraced' -benchtime 100000x ./bench/
func BenchmarkThroughputTraced(b *testing.B) {
	for _, payload := range []int{64, 1024} {
		for _, mode := range []string{"off", "unsampled", "sampled"} {
			for _, name := range []string{"ours", "google"} {
				b.Run(fmt.Sprintf("payload=%dB/outstanding=1000/tracing=%s/client=%s", payload, mode, name), func(b *testing.B) {
					var tp *sdktrace.TracerProvider
					switch mode {
					case "unsampled":
						tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithBatcher(dropSpans{}))
					case "sampled":
						tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(dropSpans{}))
					}
					c := client{name: name + "-traced", run: tracedOurs(tp)}
					if name == "google" {
						c.run = tracedGoogle(tp)
						if tp != nil {
							old := otel.GetTracerProvider()
							otel.SetTracerProvider(tp)
							defer otel.SetTracerProvider(old)
						}
					}
					if tp != nil {
						defer tp.Shutdown(context.Background())
					}
					benchThroughput(b, c, payload, settings{outstanding: 1000, streams: 1})
				})
			}
		}
	}
}

// tracedOurs is runOurs with a tracer provider (nil: tracing off).
func tracedOurs(tp *sdktrace.TracerProvider) func(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
	return func(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
		cc := e.dial(tb)
		defer cc.Close()
		cfg := pubsubflow.SubscriberConfig{
			Conn:                   cc,
			MaxOutstandingMessages: int64(s.outstanding),
			MaxOutstandingBytes:    byteBudget,
			Streams:                s.streams,
		}
		if tp != nil {
			cfg.TracerProvider = tp
		}
		sub, err := pubsubflow.NewSubscriber(context.Background(), e.subscription(), cfg)
		if err != nil {
			return err
		}
		return sub.Run(ctx, ourParallelism, func(context.Context, *pubsubflow.Message) error {
			handled()
			return nil
		})
	}
}

// tracedGoogle is runGoogle with EnableOpenTelemetryTracing when tp is
// set (Google's client traces through the global provider, which the
// caller sets to tp).
func tracedGoogle(tp *sdktrace.TracerProvider) func(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
	return func(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
		return receiveGoogle(ctx, tb, e, s, handled, &pubsub.ClientConfig{EnableOpenTelemetryTracing: tp != nil})
	}
}

// dropSpans is an exporter that discards what it is given.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }
