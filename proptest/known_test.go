package proptest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/pipeline"
)

// The tests in this file reproduce faults of other packages that the
// property tests found, each in its smallest deterministic form. All are
// fixed (9b4b17a and the source's decode-then-hand-on, later); they run
// always, as regression tests.

// TestKnownLeaseLapseWhenDeadlineDrops: the adaptive lease deadline drops
// from the 60 s stream ack deadline to 10 s after the first fast ack, but
// the extender's next tick was scheduled a quarter of 60 s ahead (about
// 15 s) and is not moved earlier, so a message received now gets a 10 s
// deadline (its receipt modack) and nothing extends it in time: the server
// redelivers a message the client still holds (invariant 1).
//
// Found by TestSubscriberMachine (minimised: 1 stream, limit 1, stream ack
// deadline 60 s; publish 1 (acked at once), stall the handler, publish 1,
// advance 10.002 s → redelivered at 10.002 s while held). Fixed in 9b4b17a
// (the tick is pulled forward when the deadline drops).
func TestKnownLeaseLapseWhenDeadlineDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		led := newLedger(pubsubpb.NewSubscriberClient(e.srv.ClientConn()))
		s := e.subscriber(t, pubsubflow.SubscriberConfig{StreamAckDeadline: 60 * time.Second, MaxOutstandingMessages: 1}, led)
		var h hold
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- s.Run(ctx, 1, func(ctx context.Context, m *pubsubflow.Message) error { return h.wait(ctx) })
		}()
		e.publish(t, 1)
		waitFor(t, "the first ack", time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 1 })
		h.stall()
		e.publish(t, 1)
		time.Sleep(30 * time.Second)
		ss := e.srv.SubscriptionStats(e.sub)
		h.release()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if ss.Expired != 0 || len(led.Violations()) > 0 {
			t.Errorf("a held message's lease lapsed: %d expired at the server; %v (lease deadline %v)", ss.Expired, led.Violations(), s.Stats().AckDeadline)
		}
	})
}

// TestKnownSourceHoldsUntracked: messages received from the stream once
// waited untracked while the pipeline was full: the rest of a response in
// the source's hands, and one message in the hand-off between the receive
// hook and EagerTrack. After a reconnect the server delivered a fresh
// per-stream budget while the client still held the old one, so those
// messages waited there past their ack deadline and were redelivered
// although the client had received them (invariant 1).
//
// Found by TestSubscriberMachine. Fixed by the receipt steps, which lease
// and count a whole response where it is decoded, before any of it waits,
// and by streams that ask the server only for the room left.
func TestKnownSourceHoldsUntracked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		led := newLedger(pubsubpb.NewSubscriberClient(e.srv.ClientConn()))
		s := e.subscriber(t, pubsubflow.SubscriberConfig{
			StreamAckDeadline:      10 * time.Second,
			MaxOutstandingMessages: 4,
			Lease:                  flow.Fixed(2500*time.Millisecond, 10*time.Second),
		}, led)
		var h hold
		h.stall()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- s.Run(ctx, 1, func(ctx context.Context, m *pubsubflow.Message) error { return h.wait(ctx) })
		}()
		e.publish(t, 10)
		for range 2 { // each reconnect brings a fresh budget of 4, in one response
			synctest.Wait()
			time.Sleep(time.Second)
			e.srv.KillStreams(codes.Unavailable, "proptest: reconnect")
		}
		time.Sleep(15 * time.Second)
		ss, st := e.srv.SubscriptionStats(e.sub), s.Stats()
		h.release()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if ss.Expired != 0 {
			t.Errorf("%d messages the client received expired at the server (client: received %d, leases %d, buffered %d, processing %d); ledger: %v",
				ss.Expired, st.Received, st.Leases, st.Buffered, st.Processing, led.Violations())
		}
	})
}

// TestKnownStopStrandsMessages: stopping a pipeline built on Source (to
// start the next run, say with another parallelism) strands what it held:
// EagerTrack's buffer stays leased and is never handed to a later run
// (until Close nacks it, or max extension); a message already handed off
// keeps its flow permit and counts as processing (so Close waits out the
// drain timeout for it); and the message in the receive hook's hand-off is
// dropped after it was counted as received, so it is never tracked, never
// settled and Stats.Received never balances (invariants 2, 3).
//
// Found by TestSubscriberMachine (minimised: 3 streams, limit 1, buffer 1;
// kill streams, publish 4, stall, advance 18 s, rerun → 5 held, 3 leased);
// fixed in 9b4b17a (a stopped pipeline nacks what it held and what it
// stranded); the machine now allows nothing stranded.
func TestKnownStopStrandsMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		s := e.subscriber(t, pubsubflow.SubscriberConfig{MaxOutstandingMessages: 2, OnShutdown: pubsubflow.Nack}, nil)
		var h hold
		h.stall()
		handler := func(ctx context.Context, m *pubsubflow.Message) error { return h.wait(ctx) }
		start := func(ctx context.Context, p int) chan error {
			done := make(chan error, 1)
			go func() {
				done <- pipeline.FromContext(ctx, s.Source()).Via(s.Process(p, handler)).To(s.Acknowledge())
			}()
			return done
		}
		e.publish(t, 10)
		ctx1, stop1 := context.WithCancel(context.Background())
		t.Cleanup(func() { h.release(); stop1() })
		done1 := start(ctx1, 1)
		waitFor(t, "the budget in use", time.Minute, func() bool { return s.Stats().Outstanding == 2 })
		// A reconnect while the budget is in use: the held messages stay
		// where they are (one in the handler, one waiting for it).
		e.srv.KillStreams(codes.Unavailable, "proptest: reconnect")
		synctest.Wait()
		stop1()
		if err := <-done1; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		synctest.Wait()
		afterStop := s.Stats()
		h.release()
		ctx2, stop2 := context.WithCancel(context.Background())
		t.Cleanup(stop2)
		done2 := start(ctx2, 4)
		deadline := time.Now().Add(5 * time.Minute)
		for e.srv.SubscriptionStats(e.sub).Acked < 10 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		acked := e.srv.SubscriptionStats(e.sub).Acked
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		stop2()
		<-done2
		end := s.Stats()
		if acked < 10 {
			t.Errorf("the next run acked %d of 10 in 5 minutes; after the stop, with no run: %+v", acked, afterStop)
		}
		if settled := end.Acked + end.Nacked + end.NoOps + end.Expired; end.Received != settled {
			t.Errorf("after Close %d received but %d settled: %+v", end.Received, settled, end)
		}
	})
}

// TestKnownRunCancelledEarly: Run whose context is cancelled before its
// pipeline's source started returns ErrClosed, where its documentation
// promises nil ("until ctx is done or the subscriber is closed (both mean:
// stop and drain, then return nil)"): Run closes the subscriber, and the
// Source it started a moment earlier then refuses to run.
//
// Found by TestSubscriberMachine (minimised: no action at all; the drain
// phase cancelled Run at once because nothing was left to drain). Fixed in
// 9b4b17a.
func TestKnownRunCancelledEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		s := e.subscriber(t, pubsubflow.SubscriberConfig{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Run(ctx, 1, func(context.Context, *pubsubflow.Message) error { return nil }); err != nil {
			t.Errorf("Run with a cancelled context = %v, want nil", err)
		}
	})
}
