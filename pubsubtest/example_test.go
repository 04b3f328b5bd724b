package pubsubtest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// A server on loopback TCP, a raw StreamingPull client over the server's
// own connection, and the counters a test asserts on.
func ExampleNewServer() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "orders-sub", Topic: "orders"})
	if _, err := srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte("hello")}); err != nil {
		log.Fatal(err)
	}

	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	stream, err := client.StreamingPull(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := stream.Send(&pubsubpb.StreamingPullRequest{
		Subscription: sub, StreamAckDeadlineSeconds: 60, MaxOutstandingMessages: 100, ProtocolVersion: 1,
	}); err != nil {
		log.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		log.Fatal(err)
	}
	m := resp.ReceivedMessages[0]
	fmt.Println(string(m.Message.Data), m.DeliveryAttempt) // 0: the service sets it only with a dead-letter policy

	if _, err := client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: []string{m.AckId}}); err != nil {
		log.Fatal(err)
	}
	st := srv.SubscriptionStats(sub)
	fmt.Println(st.Delivered, st.Acked, st.Backlog)
	// Output:
	// hello 0
	// 1 1 0
}

// With WithBufconn the server listens in memory; Dial (or ClientConn)
// connects to it. Created inside a testing/synctest bubble together with
// its clients, it runs in virtual time.
func ExampleWithBufconn() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn())
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	conn, err := srv.Dial(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	pub := pubsubpb.NewPublisherClient(conn)
	t, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/" + srv.Project() + "/topics/topic"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(srv.Addr(), t.Name)
	// Output: bufconn projects/test-project/topics/topic
}

// Faults are injected per method by its short name.
func ExampleServer_FailNext() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "topic")
	pub := pubsubpb.NewPublisherClient(srv.ClientConn())
	req := &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}}

	srv.FailNext("Publish", 1, codes.Unavailable)
	_, err = pub.Publish(ctx, req)
	fmt.Println(status.Code(err))
	_, err = pub.Publish(ctx, req)
	fmt.Println(status.Code(err), srv.MethodStats("Publish").Injected)
	// Output:
	// Unavailable
	// OK 1
}

// Short names given to the helper methods are expanded with the server's
// project.
func ExampleWithProject() {
	srv, err := pubsubtest.NewServer(pubsubtest.WithProject("my-project"))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, err := srv.CreateTopic(context.Background(), "orders")
	fmt.Println(srv.Project(), topic, err)
	// Output: my-project projects/my-project/topics/orders <nil>
}

// The service sets delivery_attempt only on subscriptions with a
// dead-letter policy; WithDeliveryAttemptAlways sets it on every delivery,
// for a client that counts attempts.
func ExampleWithDeliveryAttemptAlways() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer(pubsubtest.WithDeliveryAttemptAlways())
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	srv.CreateTopic(ctx, "topic")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic"})
	srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")})
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	for range 2 {
		resp, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})
		if err != nil {
			log.Fatal(err)
		}
		m := resp.ReceivedMessages[0]
		fmt.Println("attempt", m.DeliveryAttempt)
		client.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: []string{m.AckId}, AckDeadlineSeconds: 0}) // nack
	}
	// Output:
	// attempt 1
	// attempt 2
}

// The service refuses ack deadlines under 10 s; WithMinAckDeadline lowers
// the bound, for tests of expiry that should not wait 10 s.
func ExampleWithMinAckDeadline() {
	ctx := context.Background()
	for _, opts := range [][]pubsubtest.Option{nil, {pubsubtest.WithMinAckDeadline(time.Second)}} {
		srv, err := pubsubtest.NewServer(opts...)
		if err != nil {
			log.Fatal(err)
		}
		srv.CreateTopic(ctx, "topic")
		_, err = srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic", AckDeadline: 2 * time.Second})
		fmt.Println(status.Code(err))
		srv.Close()
	}
	// Output:
	// InvalidArgument
	// OK
}
