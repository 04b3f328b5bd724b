package source_test

import (
	"context"
	"fmt"
	"log"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/internal/source"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Subscribe reads a subscription through any SubscriberClient: here an
// in-process test server; in production pubsubpb.NewSubscriberClient over
// a connection from connect.Dial.
func ExampleSubscribe() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "orders-worker", Topic: topic})
	for _, d := range []string{"a", "b", "c"} {
		if _, err := srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte(d)}); err != nil {
			log.Fatal(err)
		}
	}

	src, err := source.Subscribe(pubsubpb.NewSubscriberClient(srv.ClientConn()), source.Config{
		Subscription:           sub,
		MaxOutstandingMessages: 100,
	})
	if err != nil {
		log.Fatal(err)
	}
	g := stage.NewGroup(ctx)
	out := src.Run(g)
	for range 3 {
		m := <-out
		fmt.Println(string(m.Data))
		m.Ack() // no settler bound here; a Subscriber binds one on receipt
	}
	g.Cancel()
	_ = g.Wait()
	// Output:
	// a
	// b
	// c
}

// SubscribeConn takes a connection, e.g. one from connect.Dial.
func ExampleSubscribeConn() {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	src, err := source.SubscribeConn(srv.ClientConn(), source.Config{
		Subscription: "projects/p/subscriptions/sub",
		ClientID:     "worker-1",
		Streams:      2,
	})
	fmt.Println(src.ClientID(), src.StreamAckDeadline(), err)
	// Output: worker-1 1m0s <nil>
}

func ExampleConfig_Validate() {
	err := source.Config{Subscription: "orders"}.Validate()
	fmt.Println(err)
	// Output: pubsubflow/source: Subscription "orders" is not of the form projects/P/subscriptions/S
}

func ExampleDefaultClassifier() {
	fmt.Println(source.DefaultClassifier(source.Failure{Code: codes.Unavailable, Attempt: 3}))
	fmt.Println(source.DefaultClassifier(source.Failure{Code: codes.NotFound, Attempt: 1}))
	// Output:
	// true
	// false
}
