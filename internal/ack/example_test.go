package ack_test

import (
	"context"
	"fmt"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func ExampleNew() {
	ctx := context.Background()
	srv, _ := pubsubtest.NewServer()
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "billing", Topic: topic})
	_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte("a")}, &pubsubpb.PubsubMessage{Data: []byte("b")})

	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	resp, _ := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 2})

	acks, err := ack.New(client, sub, ack.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	acks.Ack(resp.ReceivedMessages[0].AckId) // sent at once: nothing is in flight
	acks.Nack(resp.ReceivedMessages[1].AckId, 0)
	if err := acks.Close(ctx); err != nil { // flushes first
		fmt.Println(err)
	}
	st := srv.SubscriptionStats(sub)
	fmt.Println("acked:", st.Acked, "nacked:", st.Nacked)
	// Output: acked: 1 nacked: 1
}

func ExampleAcknowledger_AckWithResult() {
	ctx := context.Background()
	srv, _ := pubsubtest.NewServer()
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "eos", Topic: topic, EnableExactlyOnceDelivery: true})
	_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte("a")})

	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	resp, _ := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})

	acks, _ := ack.New(client, sub, ack.Config{})
	defer acks.Close(ctx)
	live := acks.AckWithResult(resp.ReceivedMessages[0].AckId)
	fmt.Println("live:", live.Wait(ctx))
	bogus := acks.AckWithResult("no-such-ack-id")
	fmt.Println("bogus:", bogus.Wait(ctx) != nil)
	// Output:
	// live: <nil>
	// bogus: true
}
