package pubsubtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Started at init by go.opencensus.io, which Google's client imports.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		// Google's client leaves its stream keep-alive handler running up
		// to 10 s after Receive returns (until its next monitor tick).
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
	)
}

// fixture is a TCP server with a topic "topic", a subscription "sub" and raw
// gRPC clients over the server's own connection.
type fixture struct {
	srv   *Server
	pub   pubsubpb.PublisherClient
	sub   pubsubpb.SubscriberClient
	topic string
	subn  string
}

func newFixture(t testing.TB, cfg SubscriptionConfig, opts ...Option) *fixture {
	t.Helper()
	srv, err := NewServer(append([]Option{WithDeliveryAttemptAlways()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	f := &fixture{
		srv: srv,
		pub: pubsubpb.NewPublisherClient(srv.ClientConn()),
		sub: pubsubpb.NewSubscriberClient(srv.ClientConn()),
	}
	ctx := context.Background()
	if f.topic, err = srv.CreateTopic(ctx, "topic"); err != nil {
		t.Fatal(err)
	}
	if cfg.Name == "" {
		cfg.Name = "sub"
	}
	cfg.Topic = "topic"
	if f.subn, err = srv.CreateSubscription(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// publish publishes n messages "m0".."m{n-1}" with the given ordering key
// and returns their ids.
func (f *fixture) publish(t testing.TB, n int, key string) []string {
	t.Helper()
	var msgs []*pubsubpb.PubsubMessage
	for i := 0; i < n; i++ {
		msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte(fmt.Sprintf("m%d", i)), OrderingKey: key})
	}
	ids, err := f.srv.Publish(context.Background(), f.topic, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// open opens a stream with the given initial request (Subscription is
// filled in when empty) that ends with the test.
func (f *fixture) open(t testing.TB, init *pubsubpb.StreamingPullRequest) pubsubpb.Subscriber_StreamingPullClient {
	t.Helper()
	if init.Subscription == "" {
		init.Subscription = f.subn
	}
	return f.openRaw(t, init)
}

// openRaw opens a stream with exactly this initial request.
func (f *fixture) openRaw(t testing.TB, init *pubsubpb.StreamingPullRequest) pubsubpb.Subscriber_StreamingPullClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	sp, err := f.sub.StreamingPull(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// io.EOF: the server ended the stream already (an injected fault, a
	// refused request); as gRPC specifies, the caller's Recv returns its
	// status.
	if err := sp.Send(init); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return sp
}

// recvN receives until it has n messages; it fails on an error.
func recvN(t testing.TB, sp pubsubpb.Subscriber_StreamingPullClient, n int) []*pubsubpb.ReceivedMessage {
	t.Helper()
	var got []*pubsubpb.ReceivedMessage
	for len(got) < n {
		resp, err := sp.Recv()
		if err != nil {
			t.Fatalf("Recv after %d of %d messages: %v", len(got), n, err)
		}
		got = append(got, resp.ReceivedMessages...)
	}
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// deleteSub deletes a subscription (full name or short id) by calling the
// RPC method directly.
func deleteSub(srv *Server, name string) error {
	_, err := srv.rpc().DeleteSubscription(context.Background(), &pubsubpb.DeleteSubscriptionRequest{Subscription: srv.subName(name)})
	return err
}

func ackIDs(msgs []*pubsubpb.ReceivedMessage) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.AckId
	}
	return ids
}

func grpcWaitForReady() grpc.CallOption { return grpc.WaitForReady(true) }
