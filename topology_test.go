package pubsubflow

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestGoStreamsFanOutIntoOneAcknowledge: a go-streams RoundRobin splits the
// subscriber's source into two branches of our ParallelMap, merged back into
// the one Acknowledge sink; every message is acked exactly once.
func TestGoStreamsFanOutIntoOneAcknowledge(t *testing.T) {
	e := newEnv(t)
	ids := e.publish(t, 1000, nil)
	s := e.subscriber(t, SubscriberConfig{})
	var a, b atomic.Int64
	branch := func(c *atomic.Int64) stage.Flow[*Message, *Message] {
		return operators.ParallelMap(2, func(ctx context.Context, m *Message) (*Message, error) {
			c.Add(1)
			return m, nil
		})
	}
	topology := Streams(func(g *stage.Group, in streams.Source) streams.Outlet {
		br := gsflow.RoundRobin(in, 2)
		return gsflow.Merge(br[0].Via(pipeline.NewStreamsFlow(g, branch(&a))), br[1].Via(pipeline.NewStreamsFlow(g, branch(&b))))
	}, StreamsOptions{})
	done := make(chan error, 1)
	go func() { done <- pipeline.From(s.Source()).Via(topology).To(s.Acknowledge()) }()
	waitFor(t, "1000 acks", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 1000 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if e.srv.MessageStats(id).Acks != 1 {
			t.Fatalf("message %s acked %d times", id, e.srv.MessageStats(id).Acks)
		}
	}
	if a.Load() == 0 || b.Load() == 0 {
		t.Fatalf("branches saw %d and %d", a.Load(), b.Load())
	}
}

// TestGoStreamsFilterNacksDropped: what a go-streams Filter drops is nacked
// when the sub-graph closes, not left to vanish.
func TestGoStreamsFilterNacksDropped(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 100, nil)
	s := e.subscriber(t, SubscriberConfig{})
	topology := Streams(func(g *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewFilter(func(m *Message) bool {
			n, _ := strconv.Atoi(string(m.Data))
			return n%2 == 0
		}, 1))
	}, StreamsOptions{})
	done := make(chan error, 1)
	go func() { done <- pipeline.From(s.Source()).Via(topology).To(s.Acknowledge()) }()
	waitFor(t, "50 acks", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked >= 50 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Nacked < 50 || st.Leases != 0 || st.Outstanding != 0 {
		t.Fatalf("filtered messages not nacked: %+v", st)
	}
}

// TestStreamDeadlineFollowsLeaseDeadline: when the lease strategy's
// deadline differs from the stream's, the streams adopt it.
func TestStreamDeadlineFollowsLeaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 10, nil)
		s := e.subscriber(t, SubscriberConfig{StreamAckDeadline: 10 * time.Second, Lease: flow.Fixed(5*time.Second, 40*time.Second)})
		ctx, cancel := context.WithCancel(context.Background())
		release := make(chan struct{})
		done := runAsync(ctx, s, 1, func(ctx context.Context, m *Message) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
		waitFor(t, "the stream deadline to follow", time.Minute, func() bool { return s.src.StreamAckDeadline() == 40*time.Second })
		close(release)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestExactlyOnceRun: on an exactly-once subscription each ack's result
// settles when the server confirmed it.
func TestExactlyOnceRun(t *testing.T) {
	e := newEnvSub(t, pubsubtest.SubscriptionConfig{EnableExactlyOnceDelivery: true})
	e.publish(t, 50, nil)
	s := e.subscriber(t, SubscriberConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	var confirmed atomic.Int64
	done := runAsync(ctx, s, 4, func(ctx context.Context, m *Message) error {
		if !m.ExactlyOnce {
			t.Error("message does not carry the exactly-once property")
		}
		m.Ack()
		if err := m.Result().Get(ctx); err != nil {
			return err
		}
		confirmed.Add(1)
		return nil
	})
	waitFor(t, "50 confirmed acks", 30*time.Second, func() bool { return confirmed.Load() == 50 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := e.srv.SubscriptionStats(e.sub).Acked; got != 50 {
		t.Fatalf("server acked %d", got)
	}
}
