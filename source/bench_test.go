package source

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// BenchmarkReceiveTCP measures the source alone over loopback TCP against
// pubsubtest: b.N messages of 256 bytes, published beforehand, received
// through the unbuffered output (no acks; the server's deadline is 10 min).
//
//	go test -run '^$' -bench ReceiveTCP -benchtime 200000x ./source/
func BenchmarkReceiveTCP(b *testing.B) {
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			srv, err := pubsubtest.NewServer()
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			ctx := context.Background()
			topic, _ := srv.CreateTopic(ctx, "topic")
			sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: topic})
			data := make([]byte, 256)
			for start := 0; start < b.N; start += 1000 {
				batch := make([]*pubsubpb.PubsubMessage, min(1000, b.N-start))
				for i := range batch {
					batch[i] = &pubsubpb.PubsubMessage{Data: data}
				}
				if _, err := srv.Publish(ctx, topic, batch...); err != nil {
					b.Fatal(err)
				}
			}
			cc, err := srv.Dial(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			src, err := Subscribe(pubsubpb.NewSubscriberClient(cc), Config{
				Subscription:           sub,
				StreamAckDeadline:      10 * time.Minute,
				MaxOutstandingMessages: -1,
				MaxOutstandingBytes:    -1,
				Streams:                streams,
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			g := stage.NewGroup(ctx)
			out := src.Run(g)
			for range b.N {
				<-out
			}
			elapsed := time.Since(start)
			b.StopTimer()
			g.Cancel()
			_ = g.Wait()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
