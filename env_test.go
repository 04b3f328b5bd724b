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
	fix   *pubsubtest.Fixture
}

func newEnv(t testing.TB, opts ...pubsubtest.Option) *env {
	return newEnvSub(t, pubsubtest.SubscriptionConfig{}, opts...)
}

func newEnvSub(t testing.TB, sc pubsubtest.SubscriptionConfig, opts ...pubsubtest.Option) *env {
	t.Helper()
	sc.Name = "sub"
	f := pubsubtest.NewFixture(t, sc, opts...)
	return &env{srv: f.Server, topic: f.Topic, sub: f.Sub, fix: f}
}

// publish publishes n messages "0".."n-1", with ordering keys from key.
func (e *env) publish(t testing.TB, n int, key func(i int) string) []string {
	t.Helper()
	return e.fix.Publish(t, pubsubtest.Messages(n, func(i int, m *pubsubpb.PubsubMessage) {
		m.Data = []byte(fmt.Sprint(i))
		if key != nil {
			m.OrderingKey = key(i)
		}
	})...)
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
