package pubsubflow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// env is a pubsubtest server with one topic and one subscription. Inside a
// synctest bubble it uses bufconn, so time-based tests run in virtual time.
type env struct {
	srv   *pubsubtest.Server
	topic string
	sub   string
}

func newEnv(t testing.TB, opts ...pubsubtest.Option) *env {
	return newEnvSub(t, pubsubtest.SubscriptionConfig{}, opts...)
}

func newEnvSub(t testing.TB, sc pubsubtest.SubscriptionConfig, opts ...pubsubtest.Option) *env {
	t.Helper()
	srv, err := pubsubtest.NewServer(append([]pubsubtest.Option{pubsubtest.WithDeliveryAttemptAlways()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx := context.Background()
	topic, err := srv.CreateTopic(ctx, "topic")
	if err != nil {
		t.Fatal(err)
	}
	sc.Name, sc.Topic = "sub", topic
	sub, err := srv.CreateSubscription(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, topic: topic, sub: sub}
}

// publish publishes n messages "0".."n-1", with ordering keys from key.
func (e *env) publish(t testing.TB, n int, key func(i int) string) []string {
	t.Helper()
	var ids []string
	for start := 0; start < n; start += 1000 {
		var msgs []*pubsubpb.PubsubMessage
		for i := start; i < min(n, start+1000); i++ {
			m := &pubsubpb.PubsubMessage{Data: []byte(fmt.Sprint(i))}
			if key != nil {
				m.OrderingKey = key(i)
			}
			msgs = append(msgs, m)
		}
		got, err := e.srv.Publish(context.Background(), e.topic, msgs...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// subscriber makes a Subscriber on the env's subscription, closed at cleanup.
func (e *env) subscriber(t testing.TB, cfg SubscriberConfig) *Subscriber {
	t.Helper()
	cfg.Conn = e.srv.ClientConn()
	s, err := NewSubscriber(context.Background(), e.sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond until it holds or the deadline passes. Inside a
// synctest bubble the polling sleeps are virtual.
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
