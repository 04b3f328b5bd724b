package pubsubtest

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// BenchmarkDeliveryFilter measures what a filter costs: the same raw
// client as BenchmarkDelivery, on a subscription without a filter and on
// one whose filter every message matches (so that both deliver b.N
// messages), each message carrying two attributes.
//
//	go test -run '^$' -bench BenchmarkDeliveryFilter -benchtime 200000x ./pubsubtest/
func BenchmarkDeliveryFilter(b *testing.B) {
	for _, bc := range []struct{ name, filter string }{
		{"none", ""},
		{"match", `attributes.kind = "order" AND hasPrefix(attributes.region, "eu-")`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv, err := NewServer(WithProject("bench"))
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := srv.CreateTopic(ctx, benchTopic); err != nil {
				b.Fatal(err)
			}
			if _, err := srv.CreateSubscription(ctx, SubscriptionConfig{Name: benchSub, Topic: benchTopic, AckDeadline: time.Minute, Filter: bc.filter}); err != nil {
				b.Fatal(err)
			}
			attrs := map[string]string{"kind": "order", "region": "eu-west1"}
			msgs := make([]*pubsubpb.PubsubMessage, 0, 1000)
			b.ResetTimer()
			start := time.Now()
			for n := b.N; n > 0; n -= len(msgs) {
				msgs = msgs[:0]
				for i := 0; i < min(n, 1000); i++ {
					msgs = append(msgs, &pubsubpb.PubsubMessage{Data: benchData, Attributes: attrs})
				}
				if _, err := srv.Publish(ctx, benchTopic, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			rawConsume(b, ctx, pubsubpb.NewSubscriberClient(srv.ClientConn()), b.N)
			elapsed := time.Since(start)
			b.StopTimer()
			if st := srv.SubscriptionStats(benchSub); st.Filtered != 0 {
				b.Fatalf("filtered %d", st.Filtered)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

// BenchmarkFilterMatch is the cost of one filter evaluation at publish, per
// message and subscription, without the server around it.
//
//	go test -run '^$' -bench BenchmarkFilterMatch ./pubsubtest/
func BenchmarkFilterMatch(b *testing.B) {
	f, err := parseFilter(`attributes.kind = "order" AND hasPrefix(attributes.region, "eu-")`)
	if err != nil {
		b.Fatal(err)
	}
	attrs := map[string]string{"kind": "order", "region": "eu-west1"}
	b.ReportAllocs()
	for b.Loop() {
		if !f.match(attrs) {
			b.Fatal("no match")
		}
	}
}
