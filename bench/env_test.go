package bench

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// env is one pubsubtest server with topic "topic" and subscription "sub".
type env struct {
	srv   *pubsubtest.Server
	topic string
	sub   string
}

func newEnv(tb testing.TB, ackDeadline time.Duration, opts ...pubsubtest.Option) *env {
	tb.Helper()
	srv, err := pubsubtest.NewServer(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	topic, err := srv.CreateTopic(ctx, "topic")
	if err != nil {
		tb.Fatal(err)
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic", AckDeadline: ackDeadline})
	if err != nil {
		tb.Fatal(err)
	}
	return &env{srv: srv, topic: topic, sub: sub}
}

// dial returns a connection of its own; the caller (or Google's client)
// closes it.
func (e *env) dial(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	cc, err := e.srv.Dial(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return cc
}

// publish publishes n messages of payload bytes each, in chunks of 1000.
func (e *env) publish(tb testing.TB, n, payload int) {
	tb.Helper()
	if err := e.publishErr(n, payload); err != nil {
		tb.Fatal(err)
	}
}

// publishErr is publish for goroutines other than the test's.
func (e *env) publishErr(n, payload int) error {
	data := make([]byte, payload)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	msgs := make([]*pubsubpb.PubsubMessage, 0, 1000)
	for n > 0 {
		msgs = msgs[:0]
		for range min(n, 1000) {
			msgs = append(msgs, &pubsubpb.PubsubMessage{Data: data})
		}
		if _, err := e.srv.Publish(context.Background(), e.topic, msgs...); err != nil {
			return err
		}
		n -= len(msgs)
	}
	return nil
}

func (e *env) stats() pubsubtest.SubStats { return e.srv.SubscriptionStats(e.sub) }

func (e *env) subscription() string { return e.sub }
func (e *env) project() string      { return e.srv.Project() }

// feeder keeps the subscription's backlog between low and low+chunk until
// total messages were published, so a long run never holds its whole
// input in the server's heap.
type feeder struct {
	e       *env
	total   int
	payload int
	low     int
	chunk   int
	sent    int
}

// run tops the backlog up every millisecond until everything is published
// or ctx is done.
func (f *feeder) run(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for f.sent < f.total {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if f.e.stats().Backlog < int64(f.low) {
			n := min(f.chunk, f.total-f.sent)
			if err := f.e.publishErr(n, f.payload); err != nil {
				return err
			}
			f.sent += n
		}
	}
	return nil
}
