package pubsubtest_test

import (
	"context"
	"fmt"
	"log"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// A subscription with a dead-letter policy: after 5 failed deliveries
// (here nacks) the message goes to the dead-letter topic, with the
// attributes the service adds, and is acknowledged on its subscription.
func ExampleSubscriptionConfig_deadLetter() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	srv.CreateTopic(ctx, "orders")
	srv.CreateTopic(ctx, "orders-dead")
	dead, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "dead", Topic: "orders-dead"})
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{
		Name: "orders-sub", Topic: "orders", DeadLetterTopic: "orders-dead", MaxDeliveryAttempts: 5,
	})
	if err != nil {
		log.Fatal(err)
	}
	srv.Publish(ctx, "orders", &pubsubpb.PubsubMessage{Data: []byte("bad order")})

	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	for range 5 { // each nack is a failed delivery; the fifth sends the message on
		resp, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})
		if err != nil {
			log.Fatal(err)
		}
		m := resp.ReceivedMessages[0]
		fmt.Println("attempt", m.DeliveryAttempt)
		client.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: []string{m.AckId}, AckDeadlineSeconds: 0})
	}
	st := srv.SubscriptionStats(sub)
	fmt.Println("dead-lettered", st.DeadLettered, "backlog", st.Backlog)
	resp, _ := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: dead, MaxMessages: 1})
	m := resp.ReceivedMessages[0].Message
	fmt.Println(string(m.Data), m.Attributes["CloudPubSubDeadLetterSourceDeliveryCount"], m.Attributes["CloudPubSubDeadLetterSourceSubscription"])
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// attempt 4
	// attempt 5
	// dead-lettered 1 backlog 0
	// bad order 5 orders-sub
}

// A filtered subscription receives only the messages that match; the others
// are acknowledged at once. A filter that does not parse is refused with
// the position of the fault.
func ExampleSubscriptionConfig_filter() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	srv.CreateTopic(ctx, "events")
	_, err = srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "bad", Topic: "events", Filter: `attributes.kind = eu`})
	fmt.Println(status.Convert(err).Message())
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{
		Name: "eu-orders", Topic: "events", Filter: `attributes.kind = "order" AND hasPrefix(attributes.region, "eu-")`,
	})
	srv.Publish(ctx, "events",
		&pubsubpb.PubsubMessage{Data: []byte("1"), Attributes: map[string]string{"kind": "order", "region": "eu-west1"}},
		&pubsubpb.PubsubMessage{Data: []byte("2"), Attributes: map[string]string{"kind": "order", "region": "us-east1"}},
		&pubsubpb.PubsubMessage{Data: []byte("3"), Attributes: map[string]string{"kind": "refund", "region": "eu-west1"}},
	)
	resp, _ := pubsubpb.NewSubscriberClient(srv.ClientConn()).Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 10})
	for _, m := range resp.ReceivedMessages {
		fmt.Println("received", string(m.Message.Data))
	}
	fmt.Println("filtered out", srv.SubscriptionStats(sub).Filtered)
	// Output:
	// Invalid filter "attributes.kind = eu": expected a string literal, found "eu" at position 19.
	// received 1
	// filtered out 2
}

// A bounded server refuses a Publish that would hold more than the bound,
// and accepts again once messages are acknowledged.
func ExampleWithMaxBacklogBytes() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer(pubsubtest.WithMaxBacklogBytes(4 << 10))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	srv.CreateTopic(ctx, "topic")
	srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic"})
	accepted := 0
	for {
		_, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: make([]byte, 1000)})
		if err != nil {
			fmt.Println(status.Code(err))
			break
		}
		accepted++
	}
	// Each message holds its encoded size (data, id, publish time: a few
	// bytes more or less with the time) plus 160 bytes of the server's bookkeeping.
	held := srv.SubscriptionStats("sub").HeldBytes
	fmt.Println("accepted", accepted, "held within the bound:", held <= 4<<10, "at least 3 × 1000:", held >= 3000)
	// Output:
	// ResourceExhausted
	// accepted 3 held within the bound: true at least 3 × 1000: true
}
