package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// sharedHeld is a sink that holds every message it gets, unsettled, until
// ackAll.
type sharedHeld struct {
	mu sync.Mutex
	ms []*source.Message
}

func (h *sharedHeld) sink() stage.Sink[*source.Message] {
	return pipeline.ForEach(func(_ context.Context, m *source.Message) error {
		h.mu.Lock()
		h.ms = append(h.ms, m)
		h.mu.Unlock()
		return nil
	})
}

func (h *sharedHeld) ackAll() (acked int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.ms {
		if m.Ack() {
			acked++
		}
	}
	return acked
}

// sharedServer is one of the two servers of TestSharedExtenderTwoServers,
// with its source and the pipeline that leases through the shared
// Extender.
type sharedServer struct {
	fix  *pubsubtest.Fixture
	src  *source.Source
	held sharedHeld
	done chan error
}

// waitFor polls cond every 100 ms (virtual) until it holds, or fails the
// test after limit with what describe says.
func waitFor(t *testing.T, limit time.Duration, cond func() bool, describe func() string) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("after %v: %s", limit, describe())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSharedExtenderTwoServers: one Extender, made with the first server's
// client, leases the messages of sources on two servers (two
// connections), whose subscriptions have the same name or different ones.
// Each message is extended on its own server: held for three lease periods
// (10 s deadline), none is redelivered or expires, each server records the
// modacks of its own messages, and once acked each source's Stats().Acked
// is what its server applied. Before the fix every modack went to the
// Extender's client: the second server saw none and redelivered every
// message when its deadline passed, and the acks the client counted for it
// were of expired ack ids (same name), or the modacks failed with NOT_FOUND
// (another name).
func TestSharedExtenderTwoServers(t *testing.T) {
	for name, subB := range map[string]string{"same subscription name": "sub", "other subscription name": "other"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { sharedTwoServers(t, subB) })
		})
	}
}

func sharedTwoServers(t *testing.T, subB string) {
	const n, deadline = 5, 10 * time.Second
	servers := []*sharedServer{
		{fix: pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{Name: "sub", AckDeadline: deadline}, pubsubtest.WithBufconn())},
		{fix: pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{Name: subB, AckDeadline: deadline}, pubsubtest.WithBufconn())},
	}
	ext := trkExtender(t, servers[0].fix.Subscriber, ExtenderConfig{StreamAckDeadline: deadline})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, s := range servers {
		src, err := source.Subscribe(s.fix.Subscriber, source.Config{Subscription: s.fix.Sub, StreamAckDeadline: deadline})
		if err != nil {
			t.Fatal(err)
		}
		s.src, s.done = src, make(chan error, 1)
		s.fix.Backlog(t, n)
		go func() { s.done <- pipeline.FromContext(ctx, src).Via(EagerTrack(ext, 0)).To(s.held.sink()) }()
	}
	stats := func(i int) pubsubtest.SubStats { return servers[i].fix.Server.SubscriptionStats(servers[i].fix.Sub) }
	start := time.Now()
	// Held for three lease periods: each server has had the receipt modack
	// and two extensions of each of its messages, and redelivered none.
	waitFor(t, 10*deadline, func() bool {
		return time.Since(start) >= 3*deadline && stats(0).ModAcks >= 3*n && stats(1).ModAcks >= 3*n
	}, func() string {
		return fmt.Sprintf("the servers applied %d and %d modacks, want ≥ %d each", stats(0).ModAcks, stats(1).ModAcks, 3*n)
	})
	for i := range servers {
		if st := stats(i); st.Delivered != n || st.Redelivered != 0 || st.Expired != 0 || st.Outstanding != n {
			t.Fatalf("server %d after %v held: %+v; want %d delivered, none redelivered or expired", i, time.Since(start), st, n)
		}
	}
	if st := ext.Stats(); st.Expired != 0 || st.Leases != 2*n {
		t.Fatalf("Extender: %+v, want %d leases and none expired", st, 2*n)
	}
	for i, s := range servers {
		if got := s.held.ackAll(); got != n {
			t.Fatalf("server %d: %d of %d Acks took", i, got, n)
		}
	}
	waitFor(t, time.Minute, func() bool { return stats(0).Acked == n && stats(1).Acked == n }, func() string {
		return fmt.Sprintf("the servers applied %d and %d acks, want %d each", stats(0).Acked, stats(1).Acked, n)
	})
	cancel()
	for i, s := range servers {
		if err := <-s.done; !errors.Is(err, context.Canceled) {
			t.Fatalf("pipeline %d: %v", i, err)
		}
		if err := s.src.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, applied := s.src.Stats().Acked, stats(i).Acked; got != uint64(applied) || stats(i).Redelivered != 0 {
			t.Fatalf("server %d: source counts %d acked, server applied %d (redelivered %d)", i, got, applied, stats(i).Redelivered)
		}
	}
}

// TestExtenderForgetsClosedSources: an Extender that outlives its sources
// keeps a sender only for the live ones: once a source is closed, the
// next tick closes and forgets its sender (without this every source a
// long-lived Extender ever served kept one).
func TestExtenderForgetsClosedSources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const deadline = 10 * time.Second
		f := trkNewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: deadline})
		ext := trkExtender(t, f.client, ExtenderConfig{StreamAckDeadline: deadline})
		senders := func() int {
			ext.mu.Lock()
			defer ext.mu.Unlock()
			return len(ext.senders)
		}
		for round := range 3 {
			f.publish(t, 2)
			src, err := source.Subscribe(f.client, source.Config{Subscription: f.sub, StreamAckDeadline: deadline})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			var held sharedHeld
			go func() { done <- trkFused(ctx, src, ext).To(held.sink()) }()
			waitFor(t, time.Minute, func() bool {
				return f.srv.SubscriptionStats(f.sub).ModAcks >= int64(2*(round+1)) && senders() == 1
			}, func() string {
				return fmt.Sprintf("round %d: server %+v, %d senders", round, f.srv.SubscriptionStats(f.sub), senders())
			})
			held.ackAll()
			cancel()
			<-done
			if err := src.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 2*deadline, func() bool { return senders() == 0 }, func() string {
				return fmt.Sprintf("round %d: %d senders after the source closed, want 0", round, senders())
			})
		}
	})
}
