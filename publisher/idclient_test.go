package publisher

import (
	"context"
	"strconv"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// idClient is a PublisherClient that answers every Publish at once with
// ids from a fixed list, allocating nothing per request.
type idClient struct {
	pubsubpb.PublisherClient
	resp *pubsubpb.PublishResponse
}

func newIDClient(max int) *idClient {
	ids := make([]string, max)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return &idClient{resp: &pubsubpb.PublishResponse{MessageIds: ids}}
}

func (c *idClient) Publish(_ context.Context, req *pubsubpb.PublishRequest, _ ...grpc.CallOption) (*pubsubpb.PublishResponse, error) {
	return &pubsubpb.PublishResponse{MessageIds: c.resp.MessageIds[:len(req.Messages)]}, nil
}

// BenchmarkPublishOverhead is the Publisher's own cost per message: b.N
// messages of 64 B published from one goroutine to a client that answers
// at once (no gRPC, no server), each Result waited for a window of
// 10,000 later, untraced and with an unsampled tracer.
//
//	go test -run '^$' -bench PublishOverhead -benchtime 1000000x ./publisher/
func BenchmarkPublishOverhead(b *testing.B) {
	for _, mode := range []string{"off", "unsampled"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			var tp trace.TracerProvider
			if mode == "unsampled" {
				tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
			}
			p, err := NewFromClient(newIDClient(100), "projects/proj/topics/topic", Config{TracerProvider: tp})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			data := make([]byte, 64)
			const window = 10_000
			rs := make([]*Result, window)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if r := rs[i%window]; r != nil {
					if _, err := r.Get(ctx); err != nil {
						b.Fatal(err)
					}
				}
				rs[i%window] = p.Publish(ctx, &Message{Data: data})
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
