package flow_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// One Extender serves every subscription: it extends each message's
// lease on the subscription the message names. Here two sources share
// it, each with EagerTrack right after it (fused in as its receipt step).
func ExampleNewExtender() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	billing, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "billing", Topic: "orders"})
	shipping, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "shipping", Topic: "orders"})
	for i := range 2 {
		_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "order %d", i)})
	}
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())

	ext, err := flow.NewExtender(client, flow.ExtenderConfig{StreamAckDeadline: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()

	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for _, sub := range []string{billing, shipping} {
		src, err := source.Subscribe(client, source.Config{Subscription: sub})
		if err != nil {
			log.Fatal(err)
		}
		wg.Go(func() {
			n := 0
			ctx, stop := context.WithCancel(ctx)
			defer stop()
			_ = pipeline.FromContext(ctx, src).Via(flow.EagerTrack(ext, 0)).To(pipeline.ForEach(func(_ context.Context, m *source.Message) error {
				m.Ack()
				if n++; n == 2 {
					stop()
				}
				return nil
			}))
			_ = src.Close(context.Background())
			mu.Lock()
			got[shortName(sub)] = n
			mu.Unlock()
		})
	}
	wg.Wait()
	fmt.Println("billing:", got["billing"], "shipping:", got["shipping"], "leases held:", ext.Stats().Leases)
	// Output: billing: 2 shipping: 2 leases held: 0
}

// shortName is a subscription's short name.
func shortName(sub string) string { return sub[strings.LastIndex(sub, "/")+1:] }

// Fixed extends to the same deadline on a fixed tick.
func ExampleFixed() {
	fixed := flow.ExtenderConfig{Strategy: flow.Fixed(2*time.Second, 10*time.Second)}
	fmt.Println(fixed.Validate())
	bad := flow.ExtenderConfig{Strategy: flow.Fixed(time.Minute, 10*time.Second)}
	fmt.Println(bad.Validate())
	// Output:
	// <nil>
	// flow: Fixed interval 1m0s must be shorter than the deadline 10s
}

// Adaptive follows the 99th percentile of receipt→ack latency within its
// bounds, starting from the stream ack deadline.
func ExampleAdaptive() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "topic")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: topic})
	_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte("fast")})
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	ext, err := flow.NewExtender(client, flow.ExtenderConfig{
		Strategy:          flow.Adaptive(flow.AdaptiveConfig{Min: 20 * time.Second, Max: 5 * time.Minute}),
		StreamAckDeadline: 90 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	fmt.Println("before any ack:", ext.Stats().Deadline)
	src, err := source.Subscribe(client, source.Config{Subscription: sub})
	if err != nil {
		log.Fatal(err)
	}
	_ = pipeline.FromContext(ctx, src).Via(flow.EagerTrack(ext, 0)). // leased on receipt
										To(pipeline.ForEach(func(_ context.Context, m *source.Message) error {
			m.Ack() // acked within a second
			cancel()
			return nil
		}))
	_ = src.Close(context.Background())
	fmt.Println("after a fast ack:", ext.Stats().Deadline)
	// Output:
	// before any ack: 1m30s
	// after a fast ack: 20s
}
