package proptest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// env is a pubsubtest server over bufconn with one topic and one
// subscription, for the scenario tests; make it inside a synctest bubble.
type env struct {
	srv   *pubsubtest.Server
	topic string
	sub   string
}

func newEnv(t testing.TB, opts ...pubsubtest.Option) *env {
	t.Helper()
	srv, err := pubsubtest.NewServer(append([]pubsubtest.Option{pubsubtest.WithBufconn(), pubsubtest.WithDeliveryAttemptAlways()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	topic, err := srv.CreateTopic(ctx, "topic")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, topic: topic, sub: sub}
}

// publish publishes n small messages.
func (e *env) publish(t testing.TB, n int) {
	t.Helper()
	msgs := make([]*pubsubpb.PubsubMessage, n)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i))}
	}
	if _, err := e.srv.Publish(context.Background(), e.topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

// subscriber makes a Subscriber on the env's subscription through client
// (nil: the server's own connection); it is closed at cleanup.
func (e *env) subscriber(t testing.TB, cfg pubsubflow.SubscriberConfig, client pubsubpb.SubscriberClient) *pubsubflow.Subscriber {
	t.Helper()
	if client == nil {
		cfg.Conn = e.srv.ClientConn()
	} else {
		cfg.Client = client
	}
	s, err := pubsubflow.NewSubscriber(context.Background(), e.sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitFor polls cond until it holds or d of (virtual) time has passed.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
