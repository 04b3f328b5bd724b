package ack

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// BenchmarkAckLatency measures how long an ack takes from Ack to the
// server's answer, with 8 goroutines that each ack one message and wait for
// it before the next (a worker pool that waits on confirmations), against
// pubsubtest over loopback TCP. The caller waits on the ack's Result (a
// Tag): told when the server has it, with exactly-once or without. Reports p50 and p99 in ms.
//
//	go test -run '^$' -bench AckLatency -benchtime 4000x ./ack
func BenchmarkAckLatency(b *testing.B) {
	for _, eo := range []bool{false, true} {
		b.Run(fmt.Sprintf("exactly-once=%v", eo), func(b *testing.B) { benchmarkAckLatency(b, eo) })
	}
}

func benchmarkAckLatency(b *testing.B, eo bool) {
	const workers = 8
	srv, err := pubsubtest.NewServer()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	if _, err := srv.CreateTopic(ctx, "topic"); err != nil {
		b.Fatal(err)
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic", EnableExactlyOnceDelivery: eo, AckDeadline: 600 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	ackIDs := pullN(b, srv, client, sub, b.N)

	a, err := New(client, sub, Config{})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, len(ackIDs))
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ackIDs) {
					return
				}
				id := ackIDs[i]
				start := time.Now()
				r := newResult()
				a.AckTag(id, eo, r)
				if err := r.Wait(ctx); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := a.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if st := srv.SubscriptionStats(sub); st.Acked != int64(len(ackIDs)) {
		b.Fatalf("server acked %d, want %d", st.Acked, len(ackIDs))
	}
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acks/s")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pullN publishes n messages and pulls them, returning their ack ids.
func pullN(b *testing.B, srv *pubsubtest.Server, client pubsubpb.SubscriberClient, sub string, n int) []string {
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		var batch []*pubsubpb.PubsubMessage
		for i := start; i < min(n, start+1000); i++ {
			batch = append(batch, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "m%d", i)})
		}
		if _, err := srv.Publish(ctx, "topic", batch...); err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]string, 0, n)
	for len(ids) < n {
		resp, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range resp.GetReceivedMessages() {
			ids = append(ids, m.GetAckId())
		}
	}
	return ids
}
