package sink

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// TestAck100kMessages: 100,000 messages through stream → FlowGate →
// Acknowledge over loopback TCP, with the default budget (1000
// outstanding, on the server and here), are acked in requests that carry
// many ack ids each, none redelivered.
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
	r := newRig(t, srv, 1000)
	r.publish(t, n)

	start := time.Now()
	r.start()
	r.waitAcked(t, int64(n), 5*time.Millisecond, 50*time.Second)
	elapsed := time.Since(start)
	r.stop(t)

	calls := srv.MethodStats("Acknowledge").Calls
	// Full batches of 1000, plus at most one partial batch per gap between
	// requests (acks coalesce behind the request in flight, and requests
	// start at least ack.DefaultGap apart), plus a few.
	maxCalls := int64((n+999)/1000) + int64(elapsed/ack.DefaultGap) + 5
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
		r := newRig(t, srv, 1000)
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

// TestThroughputNotCappedByAckBatching: with 500 outstanding allowed
// (fewer than a full 1000-id request), acks that waited for a flush timer
// would cap a fast pipeline at 500 per interval; sent at once when
// nothing is in flight, and coalesced behind what is, they do not. Virtual
// time, so only waiting counts: 20,000 messages take well under the 4 s
// a 100 ms flush interval would impose.
func TestThroughputNotCappedByAckBatching(t *testing.T) {
	const n, limit = 20_000, 500
	synctest.Test(t, func(t *testing.T) {
		srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		r := newRig(t, srv, limit)
		r.publish(t, n)
		start := time.Now()
		r.start()
		r.waitAcked(t, n, time.Millisecond, time.Minute)
		elapsed := time.Since(start)
		r.stop(t)
		calls := srv.MethodStats("Acknowledge").Calls
		t.Logf("%d messages in %v virtual (%.0f/s), %d Acknowledge RPCs", n, elapsed, n/elapsed.Seconds(), calls)
		if elapsed > 300*time.Millisecond {
			t.Fatalf("took %v, want at most 300ms", elapsed)
		}
	})
}

// TestExactlyOnceExpiredAck: on an exactly-once subscription, acking a
// message whose ack deadline passed (nobody extended it) fails: the
// client knows its deadline, so the ack is not sent and its Result says
// the lease expired; were the client wrong about the deadline, the
// server refuses the ack id for good. The permits are released all the
// same.
func TestExactlyOnceExpiredAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		r := newRig(t, srv, 10, func(c *pubsubtest.SubscriptionConfig) { c.EnableExactlyOnceDelivery = true })
		r.publish(t, 2)
		r.publish(t, 1)
		gated := r.startGated()
		late, fresh, unknown := <-gated, <-gated, <-gated
		// The client thinks this one's deadline far away: only the server
		// can tell it expired.
		message.Of(unknown).SetDeadline(time.Now().Add(time.Hour), time.Hour)
		if !late.ExactlyOnce {
			t.Fatal("the message does not say exactly-once")
		}
		fresh.Ack()
		if err := fresh.Result().Get(t.Context()); err != nil {
			t.Fatalf("live ack: %v", err)
		}

		time.Sleep(61 * time.Second) // past the 60 s stream ack deadline
		if late.Ack() || !errors.Is(late.Result().Get(t.Context()), source.ErrLeaseExpired) || late.Outcome() != source.Expired {
			t.Fatalf("ack past the deadline: outcome %v, result %v; want expired", late.Outcome(), late.Result().Get(t.Context()))
		}
		unknown.Ack()
		err = unknown.Result().Get(t.Context())
		var ae *source.AckError
		if !errors.As(err, &ae) || !errors.Is(err, source.ErrAckRefused) || ae.Reason != ack.ReasonInvalidAckID {
			t.Fatalf("expired ack: %v, want a refused invalid-ack-id failure", err)
		}
		// The three first deliveries gave their permits back (redelivered
		// copies, if they came, hold their own).
		if st := r.fc.Stats(); st.Acquired-st.Released != st.Outstanding || st.Released != 3 {
			t.Fatalf("flow after the failed ack: %+v", st)
		}
		r.stop(t)
	})
}
