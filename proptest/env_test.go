package proptest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/internal/testfix"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// env is a pubsubtest server over bufconn with one topic and one
// subscription, for the scenario tests; make it inside a synctest bubble.
type env struct {
	fix   *testfix.Fixture
	srv   *pubsubtest.Server
	topic string
	sub   string
}

func newEnv(t testing.TB, opts ...pubsubtest.Option) *env {
	t.Helper()
	f := testfix.New(t, pubsubtest.SubscriptionConfig{}, append([]pubsubtest.Option{pubsubtest.WithBufconn()}, opts...)...)
	return &env{fix: f, srv: f.Server, topic: f.Topic, sub: f.Sub}
}

// publish publishes n small messages.
func (e *env) publish(t testing.TB, n int) {
	t.Helper()
	e.fix.Publish(t, testfix.Messages(n, func(i int, m *pubsubpb.PubsubMessage) { m.Data = []byte(strconv.Itoa(i)) })...)
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
