package pubsubtest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// openStream opens a StreamingPull stream on sub and waits until the server
// has it, so that the stream has an id the fault methods can name.
func openStream(ctx context.Context, srv *pubsubtest.Server, sub string, want int) pubsubpb.Subscriber_StreamingPullClient {
	stream, err := pubsubpb.NewSubscriberClient(srv.ClientConn()).StreamingPull(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := stream.Send(&pubsubpb.StreamingPullRequest{Subscription: sub, StreamAckDeadlineSeconds: 60, ClientId: "example"}); err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(srv.Streams(sub)) < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("the stream did not reach the server")
		}
	}
	return stream
}

// newExampleServer is a server with the topic "topic" and the subscription
// "sub" on it.
func newExampleServer(cfg pubsubtest.SubscriptionConfig, opts ...pubsubtest.Option) (*pubsubtest.Server, string) {
	srv, err := pubsubtest.NewServer(opts...)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := srv.CreateTopic(ctx, "topic"); err != nil {
		log.Fatal(err)
	}
	cfg.Name, cfg.Topic = "sub", "topic"
	sub, err := srv.CreateSubscription(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	return srv, sub
}

// KillStreams ends streams as a network failure or a server restart would:
// the client sees the status and must reconnect.
func ExampleServer_KillStreams() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, sub := newExampleServer(pubsubtest.SubscriptionConfig{})
	defer srv.Close()
	first := openStream(ctx, srv, sub, 1)
	second := openStream(ctx, srv, sub, 2)

	fmt.Println("killed", srv.KillStreams(codes.Unavailable, "connection reset", srv.Streams(sub)[0].ID))
	_, err := first.Recv()
	fmt.Println(status.Code(err), status.Convert(err).Message())
	fmt.Println("killed", srv.KillStreams(codes.Unavailable, "server going away")) // every open stream
	_, err = second.Recv()
	fmt.Println(status.Code(err))
	// Output:
	// killed 1
	// Unavailable connection reset
	// killed 1
	// Unavailable
}

// A stalled stream reads requests but sends nothing, as a congested
// network or a stuck server would, until it is resumed.
func ExampleServer_StallStreams() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, sub := newExampleServer(pubsubtest.SubscriptionConfig{})
	defer srv.Close()
	srv.StallStreams(true) // every stream, present and future
	stream := openStream(ctx, srv, sub, 1)
	srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("held back")})
	fmt.Println("stalled", srv.Streams(sub)[0].Stalled)

	srv.StallStreams(false)
	resp, err := stream.Recv()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(resp.ReceivedMessages[0].Message.Data))
	// Output:
	// stalled true
	// held back
}

// Restart drops every connection and serves again on the same address;
// topics, subscriptions and messages survive.
func ExampleServer_Restart() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, sub := newExampleServer(pubsubtest.SubscriptionConfig{})
	defer srv.Close()
	stream := openStream(ctx, srv, sub, 1)
	srv.StallStreams(true) // so that the old stream cannot deliver the message
	srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("kept")})
	if err := srv.Restart(); err != nil {
		log.Fatal(err)
	}
	srv.StallStreams(false)
	_, err := stream.Recv()
	fmt.Println(status.Code(err))
	st := srv.SubscriptionStats(sub)
	fmt.Println("backlog", st.Backlog, "streams", st.Streams)
	// Output:
	// Unavailable
	// backlog 1 streams 1
}

// SetLatency delays every call of a method, as a slow network would.
func ExampleServer_SetLatency() {
	ctx := context.Background()
	srv, _ := newExampleServer(pubsubtest.SubscriptionConfig{})
	defer srv.Close()
	srv.SetLatency("Publish", 50*time.Millisecond)
	pub := pubsubpb.NewPublisherClient(srv.ClientConn())
	start := time.Now()
	_, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: "projects/test-project/topics/topic", Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}})
	fmt.Println(err, time.Since(start) >= 50*time.Millisecond)
	// Output: <nil> true
}

// On an exactly-once subscription an ack can fail per ack id, as the
// service reports it: the reason is in the error's ErrorInfo metadata.
func ExampleServer_FailNextAckIDs() {
	ctx := context.Background()
	srv, sub := newExampleServer(pubsubtest.SubscriptionConfig{EnableExactlyOnceDelivery: true})
	defer srv.Close()
	srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")})
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	resp, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})
	if err != nil {
		log.Fatal(err)
	}
	ackID := resp.ReceivedMessages[0].AckId
	ack := &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: []string{ackID}}

	srv.FailNextAckIDs(1, "TRANSIENT_FAILURE_UNORDERED_ACK_ID")
	_, err = client.Acknowledge(ctx, ack)
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			fmt.Println(status.Code(err), info.Reason, info.Metadata[ackID])
		}
	}
	_, err = client.Acknowledge(ctx, ack) // a client retries a transient failure
	fmt.Println(err, srv.SubscriptionStats(sub).Acked)
	// Output:
	// InvalidArgument EXACTLY_ONCE_ACKID_FAILURE TRANSIENT_FAILURE_UNORDERED_ACK_ID
	// <nil> 1
}

// MessageStats counts the deliveries and acks of one message, by the id
// Publish returned.
func ExampleServer_MessageStats() {
	ctx := context.Background()
	srv, sub := newExampleServer(pubsubtest.SubscriptionConfig{})
	defer srv.Close()
	ids, _ := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")})
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	pull := func() string {
		resp, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})
		if err != nil || len(resp.ReceivedMessages) != 1 {
			log.Fatal("nothing to pull: ", err)
		}
		return resp.ReceivedMessages[0].AckId
	}
	nack := &pubsubpb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: []string{pull()}, AckDeadlineSeconds: 0}
	client.ModifyAckDeadline(ctx, nack)
	client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: []string{pull()}})
	fmt.Printf("%+v\n", srv.MessageStats(ids[0]))
	// Output: {Deliveries:2 Acks:1}
}

// Streams describes every stream with the values of its first request;
// with WithRecordStreamRequests it keeps the requests themselves too.
func ExampleServer_Streams() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, sub := newExampleServer(pubsubtest.SubscriptionConfig{}, pubsubtest.WithRecordStreamRequests())
	defer srv.Close()
	stream := openStream(ctx, srv, sub, 1)
	if err := stream.Send(&pubsubpb.StreamingPullRequest{}); err != nil { // a heartbeat
		log.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); srv.Streams(sub)[0].Heartbeats < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("the heartbeat did not reach the server")
		}
	}
	info := srv.Streams(sub)[0]
	fmt.Println(info.ID, info.ClientID, info.AckDeadline, info.Open, len(info.RequestLog))
	// Output: 1 example 1m0s true 2
}
