package ack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
)

const testSub = "projects/p/subscriptions/s"

func newAck(t *testing.T, c *stubClient, cfg Config) *Acknowledger {
	t.Helper()
	a, err := New(c, testSub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func closeAck(t *testing.T, a *Acknowledger) {
	t.Helper()
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// TestLoneAckGoesAtOnce: with nothing in flight an ack is sent the moment
// it is made (virtual time does not move).
func TestLoneAckGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{}
		a := newAck(t, c, Config{})
		start := time.Now()
		sent := make(chan time.Time, 1)
		c.reply = func(context.Context, call) error { sent <- time.Now(); return nil }
		a.Ack("x")
		if at := <-sent; at != start {
			t.Fatalf("sent after %v, want at once", at.Sub(start))
		}
		closeAck(t, a)
	})
}

// TestKindsAndDeadlinesSeparate: acks, nacks, delayed nacks and extensions
// go in separate requests with the right deadlines.
func TestKindsAndDeadlinesSeparate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{}
		rec := &recorder{}
		a := newAck(t, c, Config{Events: rec.fn})
		a.Ack("a1")
		a.Nack("n1", 0)
		a.Nack("n2", 1500*time.Millisecond) // rounds up to 2 s
		a.Modack("m1", 30)
		a.Modacks([]string{"m2", "m3"}, 30)
		a.Modack("m4", 9999) // clamps to 600
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, c := range c.snapshot() {
			got[fmt.Sprintf("%s/%d", c.method, c.seconds)] = strings.Join(c.ids, ",")
		}
		want := map[string]string{
			"Acknowledge/0":         "a1",
			"ModifyAckDeadline/0":   "n1",
			"ModifyAckDeadline/2":   "n2",
			"ModifyAckDeadline/30":  "m1,m2,m3",
			"ModifyAckDeadline/600": "m4",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("requests = %v\nwant %v", got, want)
		}
		if rec.count("ack") != 1 || rec.count("nack") != 2 {
			t.Fatalf("events: %d acks, %d nacks; want 1, 2", rec.count("ack"), rec.count("nack"))
		}
		closeAck(t, a)
	})
}

// TestRequestsNeverExceedLimits: long ack ids are split by encoded size,
// not only by count.
func TestRequestsNeverExceedLimits(t *testing.T) {
	for _, n := range []int{300, 1000, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &stubClient{}
				a := newAck(t, c, Config{})
				long := strings.Repeat("x", n)
				for i := range 2000 {
					a.Ack(fmt.Sprintf("%06d%s", i, long))
				}
				closeAck(t, a)
				total := 0
				for _, c := range c.snapshot() {
					if c.size > ackids.MaxBytes || len(c.ids) > ackids.MaxIDs {
						t.Fatalf("request of %d ids, %d bytes", len(c.ids), c.size)
					}
					total += len(c.ids)
				}
				if total != 2000 {
					t.Fatalf("sent %d ack ids, want 2000", total)
				}
			})
		})
	}
}

// TestMaxInFlight: no more than MaxInFlight RPCs of a kind at once, and
// the acks go on accumulating meanwhile.
func TestMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var cur, peak atomic.Int64
		c := &stubClient{reply: func(ctx context.Context, _ call) error {
			n := cur.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			defer cur.Add(-1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}}
		a := newAck(t, c, Config{MaxInFlight: 2})
		for _, id := range ids("a", 5000) {
			a.Ack(id)
		}
		a.Modack("m", 10)
		time.Sleep(time.Second)
		synctest.Wait()
		if p := peak.Load(); p != 3 { // 2 Acknowledge + 1 ModifyAckDeadline
			t.Fatalf("peak in flight = %d, want 3", p)
		}
		close(release)
		closeAck(t, a)
		if got := c.idsSent("Acknowledge"); got != 5000 {
			t.Fatalf("acked %d, want 5000", got)
		}
	})
}

// TestRetriesTransientFailures: UNAVAILABLE is retried with backoff and
// nothing is lost.
func TestRetriesTransientFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fails atomic.Int64
		fails.Store(4)
		c := &stubClient{reply: func(context.Context, call) error {
			if fails.Add(-1) >= 0 {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		}}
		rec := &recorder{}
		a := newAck(t, c, Config{Events: rec.fn})
		for _, id := range ids("a", 10) {
			a.Ack(id)
		}
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if rec.count("ack") != 10 || rec.count("ack_failed") != 0 {
			t.Fatalf("acked %d, failed %d; want 10, 0", rec.count("ack"), rec.count("ack_failed"))
		}
		if e, ok := rec.first("retry"); !ok || e.Delay <= 0 || status.Code(e.Err) != codes.Unavailable {
			t.Fatalf("retry event = %+v", e)
		}
		closeAck(t, a)
	})
}

// TestRetryDeadline: a failure that lasts gives up after the retry deadline
// and reports the ack ids.
func TestRetryDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{reply: func(context.Context, call) error { return status.Error(codes.Unavailable, "down") }}
		rec := &recorder{}
		a := newAck(t, c, Config{Events: rec.fn})
		start := time.Now()
		a.Ack("a")
		r := a.AckWithResult("b")
		err := r.Wait(t.Context())
		if !errors.Is(err, ErrRetryExhausted) || status.Code(err) != codes.Unavailable {
			t.Fatalf("exactly-once result = %v, want retry exhausted with UNAVAILABLE", err)
		}
		// It gives up at the attempt whose next pause (at most 64 s) would
		// pass the deadline.
		if d := time.Since(start); d < 536*time.Second || d > 600*time.Second {
			t.Fatalf("exactly-once gave up after %v, want within the 600 s deadline", d)
		}
		if e, ok := rec.first("ack_failed"); !ok || e.Count != 1 || !errors.Is(e.Err, ErrRetryExhausted) {
			t.Fatalf("ack_failed event for the plain ack = %+v", e)
		}
		closeAck(t, a)
	})
}

// TestPermanentFailureNotRetried: a status outside the retryable set fails
// at once.
func TestPermanentFailureNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{reply: func(context.Context, call) error { return status.Error(codes.PermissionDenied, "no") }}
		rec := &recorder{}
		a := newAck(t, c, Config{Events: rec.fn})
		r := a.AckWithResult("a")
		err := r.Wait(t.Context())
		var ie *IDError
		if !errors.As(err, &ie) || !errors.Is(err, ErrPermanent) || status.Code(err) != codes.PermissionDenied || ie.AckID != "a" {
			t.Fatalf("result = %v", err)
		}
		if n := len(c.snapshot()); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
		closeAck(t, a)
	})
}

func ackIDFailure(reasons map[string]string) error {
	st := status.New(codes.InvalidArgument, "Some acknowledgement ids in the request were invalid.")
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: "EXACTLY_ONCE_ACKID_FAILURE", Domain: "pubsub.googleapis.com", Metadata: reasons})
	return st.Err()
}

// TestExactlyOncePerAckID: the ErrorInfo metadata decides per ack id:
// TRANSIENT_ retried, PERMANENT_ failed, unlisted confirmed.
func TestExactlyOncePerAckID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The first id goes alone (nothing in flight), the others together
		// behind it; the server fails "t" once (transient) and "p" for good.
		var tries, calls atomic.Int64
		// The first request waits until all four ids are queued, so the
		// other three always coalesce behind it.
		queued := make(chan struct{})
		c := &stubClient{reply: func(_ context.Context, c call) error {
			if calls.Add(1) == 1 {
				<-queued
			}
			reasons := map[string]string{}
			for _, id := range c.ids {
				switch id {
				case "t":
					if tries.Add(1) == 1 {
						reasons[id] = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
					} else if len(c.ids) != 1 {
						return fmt.Errorf("retried %v, want only the transient id", c.ids)
					}
				case "p":
					reasons[id] = ReasonInvalidAckID
				}
			}
			if len(reasons) > 0 {
				return ackIDFailure(reasons)
			}
			return nil
		}}
		rec := &recorder{}
		a := newAck(t, c, Config{Events: rec.fn})
		rs := map[string]*Result{}
		for _, id := range []string{"ok1", "t", "p", "ok2"} {
			rs[id] = a.AckWithResult(id)
		}
		close(queued)
		for id, r := range rs {
			err := r.Wait(t.Context())
			switch id {
			case "p":
				var ie *IDError
				if !errors.As(err, &ie) || ie.Reason != ReasonInvalidAckID || !errors.Is(err, ErrPermanent) {
					t.Fatalf("%s: %v, want a permanent invalid-ack-id error", id, err)
				}
			default:
				if err != nil {
					t.Fatalf("%s: %v", id, err)
				}
			}
		}
		closeAck(t, a) // the events are reported by then; a result may resolve first
		if rec.count("ack") != 3 || rec.count("ack_failed") != 1 || rec.count("retry") != 1 {
			t.Fatalf("events: ack %d, failed %d, retry %d; want 3, 1, 1", rec.count("ack"), rec.count("ack_failed"), rec.count("retry"))
		}
	})
}

// TestCloseGivesUp: Close bounded by its context aborts the RPCs in flight
// and settles every result with ErrClosed; nothing is left running.
func TestCloseGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{reply: func(ctx context.Context, _ call) error {
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}}
		rec := &recorder{}
		a := newAck(t, c, Config{Events: rec.fn})
		r := a.AckWithResult("stuck")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := a.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want the context's deadline", err)
		}
		if err := r.Wait(t.Context()); !errors.Is(err, ErrClosed) {
			t.Fatalf("result = %v, want ErrClosed", err)
		}
		if rec.count("ack_failed") != 1 {
			t.Fatalf("ack_failed count %d, want 1", rec.count("ack_failed"))
		}
		if r := a.AckWithResult("late"); !errors.Is(r.Wait(t.Context()), ErrClosed) {
			t.Fatal("an ack after Close did not fail with ErrClosed")
		}
	})
}

// TestCloseFlushes: Close sends what is pending before it returns.
func TestCloseFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{}
		a := newAck(t, c, Config{})
		for _, id := range ids("a", 10) {
			a.Ack(id)
		}
		a.Nack("n", 0)
		closeAck(t, a)
		if c.idsSent("Acknowledge") != 10 || c.idsSent("ModifyAckDeadline") != 1 {
			t.Fatalf("sent %v", c.snapshot())
		}
	})
}

func TestNewValidatesConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{MaxInFlight: -1}, "MaxInFlight"},
		{Config{MaxInFlight: 5000}, "MaxInFlight"},
		{Config{RetryDeadline: -time.Second}, "RetryDeadline"},
		{Config{RPCTimeout: -time.Second}, "RPCTimeout"},
	} {
		a, err := New(&stubClient{}, testSub, tc.cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("New(%+v) = %v, want mention of %q", tc.cfg, err, tc.want)
		}
		if a != nil {
			closeAck(t, a)
		}
	}
	if _, err := New(nil, testSub, Config{}); err == nil {
		t.Error("New accepted a nil client")
	}
	if _, err := New(&stubClient{}, "", Config{}); err == nil {
		t.Error("New accepted an empty subscription")
	}
}

func TestDelaySeconds(t *testing.T) {
	for d, want := range map[time.Duration]int32{
		0: 0, -time.Second: 0, time.Millisecond: 1, time.Second: 1,
		1500 * time.Millisecond: 2, time.Hour: 600,
	} {
		if got := DelaySeconds(d); got != want {
			t.Errorf("DelaySeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestConcurrentUse: many goroutines ack, nack and flush while a third of
// the RPCs fail transiently; every ack id is confirmed exactly once in the
// end and Close leaves nothing behind.
func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		confirmed := make(map[string]int)
		var mu = make(chan struct{}, 1)
		c := &stubClient{reply: func(_ context.Context, c call) error {
			if calls.Add(1)%3 == 0 {
				return status.Error(codes.Unavailable, "flaky")
			}
			mu <- struct{}{}
			for _, id := range c.ids {
				confirmed[c.method+"/"+id]++
			}
			<-mu
			return nil
		}}
		a := newAck(t, c, Config{MaxInFlight: 3})
		const workers, per = 8, 3000
		done := make(chan struct{})
		for w := range workers {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range per {
					id := fmt.Sprintf("%d-%d", w, i)
					switch i % 10 {
					case 0:
						a.Nack(id, 0)
					case 1:
						a.Flush(t.Context())
						a.Ack(id)
					default:
						a.Ack(id)
					}
				}
			}()
		}
		for range workers {
			<-done
		}
		closeAck(t, a)
		if !a.isIdle() {
			t.Fatal("after Close: ack ids still pending, in flight or retrying")
		}
		if len(confirmed) != workers*per {
			t.Fatalf("confirmed %d distinct ack ids, want %d", len(confirmed), workers*per)
		}
		for id, n := range confirmed {
			if n != 1 {
				t.Fatalf("%s confirmed %d times", id, n)
			}
		}
	})
}
