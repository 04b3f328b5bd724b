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
	acks.AckTag(resp.ReceivedMessages[0].AckId, false, nil) // sent at once: nothing is in flight
	acks.NackTag(resp.ReceivedMessages[1].AckId, 0, false, nil)
	if err := acks.Close(ctx); err != nil { // flushes first
		fmt.Println(err)
	}
	st := srv.SubscriptionStats(sub)
	fmt.Println("acked:", st.Acked, "nacked:", st.Nacked)
	// Output: acked: 1 nacked: 1
}

func ExampleAcknowledger_AckTag() {
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
	var live, bogus ack.Result // an exactly-once ack's Tag: its fate can be waited on
	live.Init()
	bogus.Init()
	acks.AckTag(resp.ReceivedMessages[0].AckId, true, &live)
	fmt.Println("live:", live.Wait(ctx))
	acks.AckTag("no-such-ack-id", true, &bogus)
	fmt.Println("bogus:", bogus.Wait(ctx) != nil)
	// Output:
	// live: <nil>
	// bogus: true
}
