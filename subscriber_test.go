package pubsubflow

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// runAsync starts Run and returns its result channel.
func runAsync(ctx context.Context, s *Subscriber, n int, h Handler) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.Run(ctx, n, h) }()
	return ch
}

func TestRunAcksEverything(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 2000, nil)
	s := e.subscriber(t, SubscriberConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	var handled atomic.Int64
	done := runAsync(ctx, s, 8, func(ctx context.Context, m *Message) error {
		handled.Add(1)
		return nil
	})
	waitFor(t, "2000 acks", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 2000 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := s.Stats()
	if st.Received != 2000 || st.Acked != 2000 || st.Outstanding != 0 || st.Leases != 0 || st.Processing != 0 || st.Buffered != 0 {
		t.Fatalf("stats after drain: %+v", st)
	}
	if got := e.srv.SubscriptionStats(e.sub).Redelivered; got != 0 {
		t.Fatalf("%d redeliveries", got)
	}
}

// TestRestartSafety: streams are killed every 500 ms during a slow-consumer
// run; buffered messages survive the reconnects and keep being extended,
// so none is redelivered: the server delivers each message once and has
// one ack for it. Virtual time: 300 × 200 ms / 8 ≈ 7.5 s of handler time.
func TestRestartSafety(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		ids := e.publish(t, 300, nil)
		s := e.subscriber(t, SubscriberConfig{StreamAckDeadline: 10 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 8, func(ctx context.Context, m *Message) error {
			time.Sleep(200 * time.Millisecond)
			return nil
		})
		kills := 0
		for e.srv.SubscriptionStats(e.sub).Acked < 300 {
			time.Sleep(500 * time.Millisecond)
			kills += e.srv.KillStreams(codes.Unavailable, "test kill")
			if kills > 200 {
				t.Fatal("not done after 200 kills")
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		ss := e.srv.SubscriptionStats(e.sub)
		if ss.Expired != 0 || s.Stats().Expired != 0 {
			t.Fatalf("expirations: server %d, client %d", ss.Expired, s.Stats().Expired)
		}
		for _, id := range ids {
			if ms := e.srv.MessageStats(id); ms.Acks != 1 || ms.Deliveries != 1 {
				t.Fatalf("message %s: %d deliveries, %d acks; want 1 and 1", id, ms.Deliveries, ms.Acks)
			}
		}
		if ss.Redelivered != 0 {
			t.Fatalf("%d redeliveries, want 0: a held message was given out again", ss.Redelivered)
		}
		if kills < 5 || s.Stats().Reconnects == 0 {
			t.Fatalf("only %d kills, %d reconnects", kills, s.Stats().Reconnects)
		}
		t.Logf("kills %d, reconnects %d, redeliveries %d", kills, s.Stats().Reconnects, ss.Redelivered)
	})
}

// TestDrainOnClose: Close during processing lets in-flight messages finish
// and be acked, nacks buffered ones with the configured delay, and returns
// within the drain timeout.
func TestDrainOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 100, nil)
		s := e.subscriber(t, SubscriberConfig{ShutdownNackDelay: 20 * time.Second, DrainTimeout: 10 * time.Second})
		var started, finished atomic.Int64
		done := runAsync(context.Background(), s, 4, func(ctx context.Context, m *Message) error {
			started.Add(1)
			time.Sleep(2 * time.Second)
			finished.Add(1)
			return nil
		})
		waitFor(t, "4 in processing", time.Minute, func() bool { return s.Stats().Processing == 4 })
		synctest.Wait()
		begin := time.Now()
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if took := time.Since(begin); took > 10*time.Second {
			t.Fatalf("Close took %v, drain timeout 10 s", took)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		ss := e.srv.SubscriptionStats(e.sub)
		if started.Load() != finished.Load() || ss.Acked != finished.Load() {
			t.Fatalf("started %d, finished %d, acked %d", started.Load(), finished.Load(), ss.Acked)
		}
		held := ss.Outstanding
		if held != 100-ss.Acked {
			t.Fatalf("server holds %d, want %d nacked with a delay: %+v; client %+v", held, 100-ss.Acked, ss, s.Stats())
		}
		time.Sleep(15 * time.Second) // inside the 20 s nack delay: still held
		if got := e.srv.SubscriptionStats(e.sub).Outstanding; got != held {
			t.Fatalf("after 15 s the server holds %d of %d: the nack delay was not applied", got, held)
		}
		time.Sleep(10 * time.Second) // past it: back in the backlog
		if got := e.srv.SubscriptionStats(e.sub).Outstanding; got != 0 {
			t.Fatalf("after 25 s the server still holds %d: %+v", got, e.srv.SubscriptionStats(e.sub))
		}
		if st := s.Stats(); st.Outstanding != 0 || st.Leases != 0 {
			t.Fatalf("after Close: %+v", st)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// TestOrderingKeys: with message ordering, each key's messages are processed
// one at a time in publish order while keys run in parallel.
func TestOrderingKeys(t *testing.T) {
	e := newEnvSub(t, pubsubtest.SubscriptionConfig{EnableMessageOrdering: true})
	const keys, perKey = 20, 25
	e.publish(t, keys*perKey, func(i int) string { return "k" + strconv.Itoa(i%keys) })
	s := e.subscriber(t, SubscriberConfig{})
	var mu sync.Mutex
	last := map[string]int{}
	active := map[string]bool{}
	var violation error
	var handled atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, s, 8, func(ctx context.Context, m *Message) error {
		n, _ := strconv.Atoi(string(m.Data))
		mu.Lock()
		if active[m.OrderingKey] && violation == nil {
			violation = errors.New("two messages of key " + m.OrderingKey + " at once")
		}
		if prev, ok := last[m.OrderingKey]; ok && prev >= n && violation == nil {
			violation = errors.New("key " + m.OrderingKey + ": " + strconv.Itoa(n) + " after " + strconv.Itoa(prev))
		}
		active[m.OrderingKey] = true
		last[m.OrderingKey] = n
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		active[m.OrderingKey] = false
		mu.Unlock()
		handled.Add(1)
		return nil
	})
	waitFor(t, "all acked", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == keys*perKey })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if violation != nil {
		t.Fatal(violation)
	}
	if len(last) != keys {
		t.Fatalf("saw %d keys", len(last))
	}
}

// TestTerminalErrorEndsRun: deleting the subscription mid-run ends Run with
// NOT_FOUND naming the subscription.
func TestTerminalErrorEndsRun(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 10, nil)
	s := e.subscriber(t, SubscriberConfig{})
	var handled atomic.Int64
	done := runAsync(context.Background(), s, 2, func(ctx context.Context, m *Message) error {
		handled.Add(1)
		return nil
	})
	waitFor(t, "first messages", 10*time.Second, func() bool { return handled.Load() > 0 })
	if _, err := pubsubpb.NewSubscriberClient(e.srv.ClientConn()).DeleteSubscription(context.Background(), &pubsubpb.DeleteSubscriptionRequest{Subscription: e.sub}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if status.Code(err) != codes.NotFound {
			t.Fatalf("Run = %v, want NOT_FOUND", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the subscription was deleted")
	}
}

// TestPanickingHandlerNacks: a panic nacks that message; the subscriber
// keeps running and the redelivered message is processed.
func TestPanickingHandlerNacks(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 50, nil)
	s := e.subscriber(t, SubscriberConfig{})
	var panicked atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, s, 4, func(ctx context.Context, m *Message) error {
		if string(m.Data) == "13" && panicked.CompareAndSwap(false, true) {
			panic("handler bug")
		}
		return nil
	})
	waitFor(t, "all acked", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 50 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	var pe *stage.PanicError
	if !panicked.Load() || st.Nacked < 1 || !errors.As(st.LastError, &pe) {
		t.Fatalf("panicked %v, stats %+v", panicked.Load(), st)
	}
}

// TestSourceAcknowledgeComposition: the README usage, with our ParallelMap
// between the subscriber's two ends; Close ends the pipeline cleanly.
func TestSourceAcknowledgeComposition(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 500, nil)
	s := e.subscriber(t, SubscriberConfig{})
	work := operators.ParallelMap(4, func(ctx context.Context, m *Message) (*Message, error) { return m, nil },
		operators.Options[*Message, *Message]{})
	done := make(chan error, 1)
	go func() { done <- pipeline.From(s.Source()).Via(work).To(s.Acknowledge()) }()
	waitFor(t, "500 acks", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 500 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("pipeline: %v", err)
	}
}

// TestSlowAcknowledgeKeepsLeases: every Acknowledge takes 25 s (longer than
// the 10 s stream deadline); leases of acked messages keep being extended
// until their ack is final, so nothing expires or is redelivered.
func TestSlowAcknowledgeKeepsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 200, nil)
		e.srv.SetLatency("Acknowledge", 25*time.Second)
		s := e.subscriber(t, SubscriberConfig{StreamAckDeadline: 10 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 4, func(ctx context.Context, m *Message) error { return nil })
		waitFor(t, "acks to be sent", time.Minute, func() bool { return s.Stats().Acking > 0 })
		waitFor(t, "200 acks", 5*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 200 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ss := e.srv.SubscriptionStats(e.sub)
		if ss.Expired != 0 || ss.Redelivered != 0 {
			t.Fatalf("slow acks let leases lapse: %+v", ss)
		}
		if st := s.Stats(); st.Leases != 0 || st.Acking != 0 {
			t.Fatalf("after drain: %+v", st)
		}
	})
}

func TestUseAfterClose(t *testing.T) {
	e := newEnv(t)
	s := e.subscriber(t, SubscriberConfig{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), 1, func(context.Context, *Message) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v", err)
	}
	if err := pipeline.From(s.Source()).To(s.Acknowledge()); !errors.Is(err, ErrClosed) {
		t.Fatalf("pipeline after Close = %v", err)
	}
}

// TestReconnectWithBudgetSpentOpensNoStream: after a reconnect while the
// client holds its whole budget, the server grants a new stream nothing
// (no stream opens until there is room), so nothing waits unread and
// unleased in the transport; the held messages keep being extended; once
// the handler is released everything is acked with no redelivery.
func TestReconnectWithBudgetSpentOpensNoStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn(), pubsubtest.WithMaxMessagesPerResponse(1))
		e.publish(t, 12, nil)
		s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 4, StreamAckDeadline: 10 * time.Second})
		release := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 1, func(ctx context.Context, m *Message) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
		waitFor(t, "the first budget delivered", time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Delivered == 4 })
		opened := e.srv.SubscriptionStats(e.sub).Streams
		e.srv.KillStreams(codes.Unavailable, "test reconnect")
		time.Sleep(30 * time.Second) // three deadlines with the pipeline stalled
		synctest.Wait()
		ss := e.srv.SubscriptionStats(e.sub)
		if ss.Delivered != 4 || ss.Streams != opened || ss.Expired != 0 {
			t.Fatalf("with the budget spent: %d delivered (want 4), %d streams opened (want %d), %d expired (want 0)", ss.Delivered, ss.Streams, opened, ss.Expired)
		}
		if st := s.Stats(); st.Outstanding != 4 || st.Leases != 4 {
			t.Fatalf("Stats: %d outstanding, %d leases; want 4 and 4", st.Outstanding, st.Leases)
		}
		close(release)
		waitFor(t, "12 acks", 5*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 12 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if ss := e.srv.SubscriptionStats(e.sub); ss.Redelivered != 0 {
			t.Fatalf("%d redeliveries", ss.Redelivered)
		}
	})
}

// TestRunReturnsDespiteStuckHandler: a handler that ignores its ctx does
// not keep Run waiting for ever: once ctx is cancelled and the drain
// timeout has passed, Run returns a *StuckHandlersError counting it, and
// its message was nacked.
func TestRunReturnsDespiteStuckHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 1, nil)
		s := e.subscriber(t, SubscriberConfig{DrainTimeout: 2 * time.Second})
		stuck := make(chan struct{})
		defer close(stuck)
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 2, func(context.Context, *Message) error {
			<-stuck // ignores its ctx
			return nil
		})
		waitFor(t, "the handler running", time.Minute, func() bool { return s.Stats().Processing == 1 })
		begin := time.Now()
		cancel()
		err := <-done
		var se *StuckHandlersError
		if !errors.As(err, &se) || se.Running != 1 {
			t.Fatalf("Run = %v, want a *StuckHandlersError with 1 running", err)
		}
		if took := time.Since(begin); took > 2*time.Second+stuckGrace+time.Second {
			t.Fatalf("Run took %v to return (drain timeout 2 s)", took)
		}
		if ss := e.srv.SubscriptionStats(e.sub); ss.Nacked != 1 || ss.Outstanding != 0 {
			t.Fatalf("the stuck handler's message: %+v, want nacked", ss)
		}
	})
}
