package pubsubflow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/pipeline"
)

// stuckAcks is a subscriber whose handler has acked n messages the server
// never answers for: every Acknowledge hangs for an hour.
func stuckAcks(t *testing.T, n int, drain time.Duration) (*env, *Subscriber, context.CancelFunc, <-chan error) {
	t.Helper()
	e := newEnv(t)
	e.srv.SetLatency("Acknowledge", time.Hour)
	e.publish(t, n, nil)
	s := e.subscriber(t, SubscriberConfig{DrainTimeout: drain})
	var handled atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, s, 4, func(context.Context, *Message) error {
		handled.Add(1)
		return nil
	})
	waitFor(t, "the handler to ack every message", 10*time.Second, func() bool { return handled.Load() == int64(n) })
	t.Cleanup(cancel)
	return e, s, cancel, done
}

func TestShutdownKeepsItsDeadlineWhenAcksAreStuck(t *testing.T) {
	_, s, _, done := stuckAcks(t, 5, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	begin := time.Now()
	err := s.Shutdown(ctx)
	if took := time.Since(begin); took >= 3*time.Second {
		t.Fatalf("Shutdown with a 2 s deadline took %v", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the deadline's error (acks not flushed)", err)
	}
	<-done
	if st := s.Stats(); st.Acked != 0 || st.AckFailures != 5 || st.AckRefused != 5 {
		t.Fatalf("Acked=%d AckFailures=%d AckRefused=%d, want 0, 5 and 5: the server applied none", st.Acked, st.AckFailures, st.AckRefused)
	}
}

func TestCancelledRunKeepsTheDrainTimeoutWhenAcksAreStuck(t *testing.T) {
	_, s, cancel, done := stuckAcks(t, 5, 3*time.Second)
	begin := time.Now()
	cancel()
	<-done
	// The drain timeout, the flush's slack, and Run's grace for handlers.
	if took, most := time.Since(begin), 3*time.Second+2*shutdownSlack+stuckGrace; took > most {
		t.Fatalf("Run took %v after its cancel, want at most %v", took, most)
	}
	if st := s.Stats(); st.Acked != 0 || st.AckFailures != 5 || st.AckRefused != 5 {
		t.Fatalf("Acked=%d AckFailures=%d AckRefused=%d, want 0, 5 and 5", st.Acked, st.AckFailures, st.AckRefused)
	}
}

// TestCloseAfterSourcePipelineNacksEverything: a Source pipeline whose
// handler leaves every message unsettled, closed at once. Close must see
// the run's own settle of what its pipeline left (a nack per message)
// reach the server before the acks flush: none may fail as "closed" and
// none stay outstanding. The race it guards lost one nack in ~2% of runs,
// so it runs many times.
func TestCloseAfterSourcePipelineNacksEverything(t *testing.T) {
	for i := range 100 {
		e := newEnv(t)
		e.publish(t, 5, nil)
		s := e.subscriber(t, SubscriberConfig{OnShutdown: Nack})
		got := make(chan struct{}, 5)
		done := make(chan error, 1)
		go func() {
			done <- pipeline.From(s.Source()).To(pipeline.ForEach(func(context.Context, *Message) error {
				got <- struct{}{}
				return nil // held: Close nacks it
			}))
		}()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("no message in 10 s")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
		st, cs := e.srv.SubscriptionStats(e.sub), s.Stats()
		if st.Outstanding != 0 || st.Nacked != 5 || cs.AckFailures != 0 {
			t.Fatalf("run %d: server %+v; client %+v; want all 5 nacked", i, st, cs)
		}
	}
}
