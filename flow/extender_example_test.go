package flow_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// An Extender tracks each message on receipt and keeps its lease alive
// until the settle path releases it.
func ExampleNewExtender() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "billing", Topic: "orders"})
	_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte("order 1")})
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())

	ext, err := flow.NewExtender(client, sub, flow.ExtenderConfig{StreamAckDeadline: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()

	resp, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})
	if err != nil {
		log.Fatal(err)
	}
	m := message.FromReceived(resp.ReceivedMessages[0], sub, nil, time.Now())
	ext.Track(m) // on receipt: the lease is extended from now on
	fmt.Println("leases:", ext.Len(), "deadline:", ext.Deadline())

	// ... process the message, then ack it and release the lease.
	_, _ = client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: []string{m.AckID}})
	ext.Release(m, message.Ack)
	fmt.Println("leases:", ext.Len())
	// Output:
	// leases: 1 deadline: 10s
	// leases: 0
}

// Fixed extends to the same deadline on a fixed tick.
func ExampleFixed() {
	fixed := flow.ExtenderConfig{Strategy: flow.Fixed(2*time.Second, 10*time.Second)}
	fmt.Println(fixed.Validate())
	bad := flow.ExtenderConfig{Strategy: flow.Fixed(time.Minute, 10*time.Second)}
	fmt.Println(bad.Validate())
	// Output:
	// <nil>
	// lease: Fixed interval 1m0s must be shorter than the deadline 10s
}

// Adaptive follows the 99th percentile of receipt→ack latency within its
// bounds, starting from the stream ack deadline.
func ExampleAdaptive() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	_, _ = srv.CreateTopic(ctx, "topic")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic"})
	ext, err := flow.NewExtender(pubsubpb.NewSubscriberClient(srv.ClientConn()), sub, flow.ExtenderConfig{
		Strategy:          flow.Adaptive(flow.AdaptiveConfig{Min: 20 * time.Second, Max: 5 * time.Minute}),
		StreamAckDeadline: 90 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	fmt.Println("before any ack:", ext.Deadline())
	m := &message.Message{AckID: "a1", ReceiveTime: time.Now()}
	ext.Track(m)
	ext.Release(m, message.Ack) // acked within a second
	fmt.Println("after a fast ack:", ext.Deadline())
	// Output:
	// before any ack: 1m30s
	// after a fast ack: 20s
}
