package sink

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// TestAck100kMessages: 100,000 messages through stream → FlowGate →
// Acknowledge over loopback TCP, with the default budget (1000
// outstanding, on the server and here), are acked with about one
// Acknowledge RPC per 1000 ack ids, none redelivered.
func TestAck100kMessages(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 20_000
	}
	srv, err := pubsubtest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	r := newRig(t, srv, 1000, ack.Config{})
	r.publish(t, n)

	start := time.Now()
	r.start()
	r.waitAcked(t, int64(n), 5*time.Millisecond, 50*time.Second)
	elapsed := time.Since(start)
	r.stop(t)

	calls := srv.MethodStats("Acknowledge").Calls
	// Full batches of 1000, plus at most one partial batch per 100 ms flush
	// tick (a slow, loaded machine has more ticks in the run), plus a few.
	maxCalls := int64((n+999)/1000) + int64(elapsed/(100*time.Millisecond)) + 5
	t.Logf("%d messages in %v (%.0f/s), %d Acknowledge RPCs", n, elapsed, float64(n)/elapsed.Seconds(), calls)
	if calls > maxCalls {
		t.Errorf("%d Acknowledge RPCs for %d acks, want at most %d", calls, n, maxCalls)
	}
	st := srv.SubscriptionStats(r.sub)
	if st.Acked != int64(n) || st.Redelivered != 0 || st.Outstanding != 0 {
		t.Errorf("server: %+v", st)
	}
	if fs := r.fc.Stats(); fs.Outstanding != 0 || fs.Acquired != fs.Released {
		t.Errorf("flow: %+v", fs)
	}
}

// TestAckUnavailableLosesNothing: Acknowledge fails with UNAVAILABLE for a
// second; the acks are retried, none is lost and nothing is redelivered
// after the fault clears.
func TestAckUnavailableLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 5000
		srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		r := newRig(t, srv, 1000, ack.Config{})
		r.publish(t, n)

		srv.FailNext("Acknowledge", 1<<30, codes.Unavailable)
		r.start()
		time.Sleep(time.Second)
		srv.FailNext("Acknowledge", 0, codes.OK)
		if ms := srv.MethodStats("Acknowledge"); ms.Injected == 0 {
			t.Fatalf("the fault never hit: %+v", ms)
		}
		if st := srv.SubscriptionStats(r.sub); st.Acked != 0 {
			t.Fatalf("acked %d during the fault", st.Acked)
		}

		r.waitAcked(t, n, 10*time.Millisecond, 50*time.Second)
		// Give any redelivery a chance to show: past the ack deadline.
		time.Sleep(61 * time.Second)
		r.stop(t)
		st := srv.SubscriptionStats(r.sub)
		if st.Acked != n || st.Redelivered != 0 || st.Expired != 0 || st.Outstanding != 0 {
			t.Fatalf("server: %+v; want all %d acked, none expired or redelivered", st, n)
		}
	})
}

// never is a flow budget that is never at its limit: acks wait for the
// flush interval (Google's Go client's behaviour).
type never struct{}

func (never) AtLimit(int64) bool { return false }

// TestThroughputNotCappedByFlushInterval: with 500 outstanding allowed
// (fewer than a full 1000-id request), waiting for the 100 ms flush caps a
// fast pipeline at 500 / 100 ms = 5,000 messages/s; flushing when the flow
// budget is at its limit lifts the cap. Virtual time, so only waiting
// counts: the cap shows as 20,000 / 500 × 100 ms = 4 s.
func TestThroughputNotCappedByFlushInterval(t *testing.T) {
	const n, limit = 20_000, 500
	for _, tc := range []struct {
		name     string
		flow     ack.Budget // nil: the rig's FlowControl
		min, max time.Duration
	}{
		{"flush-at-limit", nil, 0, 300 * time.Millisecond},
		{"interval-only", never{}, 3900 * time.Millisecond, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = srv.Close() })
				r := newRig(t, srv, limit, ack.Config{Flow: tc.flow})
				r.publish(t, n)
				start := time.Now()
				r.start()
				r.waitAcked(t, n, time.Millisecond, time.Minute)
				elapsed := time.Since(start)
				r.stop(t)
				t.Logf("%d messages in %v virtual (%.0f/s), %d Acknowledge RPCs", n, elapsed, n/elapsed.Seconds(), srv.MethodStats("Acknowledge").Calls)
				if elapsed < tc.min || elapsed > tc.max {
					t.Fatalf("took %v, want within %v–%v", elapsed, tc.min, tc.max)
				}
			})
		})
	}
}

// TestExactlyOnceExpiredAck: on an exactly-once subscription, acking a
// message whose ack deadline passed (nobody extended it) settles its
// Result with a permanent invalid-ack-id failure; the permit is released
// all the same.
func TestExactlyOnceExpiredAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		r := newRig(t, srv, 10, ack.Config{}, func(c *pubsubtest.SubscriptionConfig) { c.EnableExactlyOnceDelivery = true })
		r.publish(t, 2)
		gated := r.startGated()
		late, fresh := <-gated, <-gated
		if !late.ExactlyOnce {
			t.Fatal("the message does not say exactly-once")
		}
		fresh.Ack()
		if err := fresh.Result().Wait(t.Context()); err != nil {
			t.Fatalf("live ack: %v", err)
		}

		time.Sleep(61 * time.Second) // past the 60 s stream ack deadline
		late.Ack()
		err = late.Result().Wait(t.Context())
		var ie *ack.IDError
		if !errors.As(err, &ie) || !errors.Is(err, ack.ErrPermanent) || !ie.InvalidAckID() {
			t.Fatalf("expired ack: %v, want a permanent invalid-ack-id failure", err)
		}
		if st := r.fc.Stats(); st.Acquired-st.Released != st.Outstanding || r.fc.Holds(late) {
			t.Fatalf("flow after the failed ack: %+v", st)
		}
		r.stop(t)
	})
}
