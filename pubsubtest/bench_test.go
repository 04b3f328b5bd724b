package pubsubtest

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	benchTopic = "projects/bench/topics/topic"
	benchSub   = "projects/bench/subscriptions/sub"
)

// BenchmarkDelivery measures how fast a server delivers to a minimal raw
// StreamingPull client that acks on the stream in batches, for this
// package's server and for pstest in the same run. b.N messages are
// published before the timer starts; the metric is delivered msgs/s.
//
//	go test -run '^$' -bench BenchmarkDelivery -benchtime 2s ./pubsubtest/
func BenchmarkDelivery(b *testing.B) {
	b.Run("pubsubtest", func(b *testing.B) {
		srv, err := NewServer(WithProject("bench"))
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		benchDeliver(b, srv.ClientConn(), func(n int) {
			msgs := make([]*pubsubpb.PubsubMessage, 0, 1000)
			for n > 0 {
				msgs = msgs[:0]
				for i := 0; i < min(n, 1000); i++ {
					msgs = append(msgs, &pubsubpb.PubsubMessage{Data: benchData})
				}
				if _, err := srv.Publish(context.Background(), benchTopic, msgs...); err != nil {
					b.Fatal(err)
				}
				n -= len(msgs)
			}
		})
	})
	b.Run("pstest", func(b *testing.B) {
		srv := pstest.NewServer()
		defer srv.Close()
		conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		benchDeliver(b, conn, func(n int) {
			for i := 0; i < n; i++ {
				srv.Publish(benchTopic, benchData, nil)
			}
		})
	})
}

var benchData = []byte("0123456789abcdef")

// benchDeliver creates the topic and subscription over conn, publishes b.N
// messages with publish, then times their delivery to rawConsume.
func benchDeliver(b *testing.B, conn *grpc.ClientConn, publish func(n int)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := pubsubpb.NewPublisherClient(conn)
	sub := pubsubpb.NewSubscriberClient(conn)
	if _, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: benchTopic}); err != nil {
		b.Fatal(err)
	}
	if _, err := sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: benchSub, Topic: benchTopic, AckDeadlineSeconds: 60}); err != nil {
		b.Fatal(err)
	}
	publish(b.N)
	b.ResetTimer()
	start := time.Now()
	rawConsume(b, ctx, sub, b.N)
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// rawConsume is the minimal client: one stream, acks sent on the stream
// every ackBatch messages, server-side flow control at 4×ackBatch.
func rawConsume(b *testing.B, ctx context.Context, sub pubsubpb.SubscriberClient, n int) {
	const ackBatch = 500
	sp, err := sub.StreamingPull(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := sp.Send(&pubsubpb.StreamingPullRequest{
		Subscription: benchSub, StreamAckDeadlineSeconds: 60, MaxOutstandingMessages: 4 * ackBatch,
	}); err != nil {
		b.Fatal(err)
	}
	pending := make([]string, 0, ackBatch)
	for got := 0; got < n; {
		resp, err := sp.Recv()
		if err != nil {
			b.Fatalf("Recv after %d of %d: %v", got, n, err)
		}
		for _, m := range resp.ReceivedMessages {
			pending = append(pending, m.AckId)
		}
		got += len(resp.ReceivedMessages)
		if len(pending) >= ackBatch || got >= n {
			if err := sp.Send(&pubsubpb.StreamingPullRequest{AckIds: pending}); err != nil {
				b.Fatal(err)
			}
			pending = make([]string, 0, ackBatch)
		}
	}
	_ = sp.CloseSend()
}
