package suite

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/pubsubflow/pubsubflow"
)

const (
	throughputMessages = 20000
	throughputTimeout  = 3 * time.Minute
)

// TestThroughputOursAndGoogle: one backlog of 20,000 messages (one topic,
// a subscription for each client) consumed by our Subscriber with
// Run(ctx, 8, h) and by Google's client with Receive, one after the other;
// each must handle every message, and both rates are logged (BENCHMARKS.md
// records them).
func TestThroughputOursAndGoogle(t *testing.T) {
	e := newEnv(t)
	topic := e.topic(t)
	subOurs := e.subscription(t, topic, nil)
	subGoogle := e.subscription(t, topic, nil)
	e.publish(t, topic, throughputMessages, 64)

	// Ours.
	s := newSeen()
	all := make(chan struct{})
	start := time.Now()
	r := e.start(t, subOurs, pubsubflow.SubscriberConfig{}, 8, func(_ context.Context, m *pubsubflow.Message) error {
		if s.add(m.ID) == throughputMessages {
			close(all)
		}
		return nil
	})
	select {
	case <-all:
	case <-time.After(throughputTimeout):
		t.Fatalf("ours: %d of %d within %v", s.distinct(), throughputMessages, throughputTimeout)
	}
	ours := time.Since(start)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	oursDup := s.duplicates()

	// Google's.
	g := newSeen()
	var took atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), throughputTimeout)
	defer cancel()
	sub := e.google.Subscriber(subGoogle)
	sub.ReceiveSettings.MaxOutstandingMessages = 1000 // as ours by default
	sub.ReceiveSettings.NumGoroutines = 1
	start = time.Now()
	if err := sub.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if g.add(m.ID) == throughputMessages {
			took.Store(int64(time.Since(start)))
			cancel()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if g.distinct() != throughputMessages {
		t.Fatalf("Google's client: %d of %d within %v", g.distinct(), throughputMessages, throughputTimeout)
	}
	google := time.Duration(took.Load())
	t.Logf("%d messages of 64 B, 1 stream, 1,000 outstanding: ours %v (%.0f msg/s, %d duplicates), Google's client %v (%.0f msg/s, %d duplicates)",
		throughputMessages, ours.Round(time.Millisecond), throughputMessages/ours.Seconds(), oursDup,
		google.Round(time.Millisecond), throughputMessages/google.Seconds(), g.duplicates())
}
