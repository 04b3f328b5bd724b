package pubsubtest

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// Fixture is the test fixture the module's tests share, and yours may: a
// running server with one topic and one subscription, raw gRPC clients
// over the server's connection, and a way to publish a backlog. The
// server, and so the clients' connection, close when the test ends.
type Fixture struct {
	Server     *Server
	Topic      string // full name of the topic
	Sub        string // full name of the subscription
	Publisher  pubsubpb.PublisherClient
	Subscriber pubsubpb.SubscriberClient
}

// NewFixture starts a server with opts, after WithDeliveryAttemptAlways
// (so that tests see delivery attempts without a dead-letter policy), and
// creates the topic "topic" and the subscription sc on it: sc.Name defaults
// to "sub" and sc.Topic to the topic. Make it inside a testing/synctest
// bubble, with WithBufconn, for a test in virtual time.
func NewFixture(t testing.TB, sc SubscriptionConfig, opts ...Option) *Fixture {
	t.Helper()
	srv, err := NewServer(append([]Option{WithDeliveryAttemptAlways()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	topic, err := srv.CreateTopic(ctx, "topic")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name == "" {
		sc.Name = "sub"
	}
	if sc.Topic == "" {
		sc.Topic = topic
	}
	sub, err := srv.CreateSubscription(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	return &Fixture{
		Server:     srv,
		Topic:      topic,
		Sub:        sub,
		Publisher:  pubsubpb.NewPublisherClient(srv.ClientConn()),
		Subscriber: pubsubpb.NewSubscriberClient(srv.ClientConn()),
	}
}

// Messages returns n messages with data "m0", "m1", …; shape, when not
// nil, then changes each one (its data, an ordering key, attributes).
func Messages(n int, shape func(i int, m *pubsubpb.PubsubMessage)) []*pubsubpb.PubsubMessage {
	msgs := make([]*pubsubpb.PubsubMessage, n)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "m%d", i)}
		if shape != nil {
			shape(i, msgs[i])
		}
	}
	return msgs
}

// Publish publishes msgs to the topic, in requests of as many messages as
// the service takes in one, and returns their ids in order.
func (f *Fixture) Publish(t testing.TB, msgs ...*pubsubpb.PubsubMessage) []string {
	t.Helper()
	ids := make([]string, 0, len(msgs))
	for start := 0; start < len(msgs); start += limits.MaxRequestMessages {
		got, err := f.Server.Publish(context.Background(), f.Topic, msgs[start:min(len(msgs), start+limits.MaxRequestMessages)]...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// Backlog publishes n messages "m0".."m{n-1}" and returns their ids.
func (f *Fixture) Backlog(t testing.TB, n int) []string {
	t.Helper()
	return f.Publish(t, Messages(n, nil)...)
}
