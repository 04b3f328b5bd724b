package proptest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow"
)

// settleBound is how long, in virtual time, the topology has in the quiet
// phase to settle every message it was handed and to take the fresh
// messages, beyond Options.MaxLatency.
const settleBound = 5 * time.Minute

// finish ends a case: a quiet phase (drawn: most cases), Close, and a
// drain of the subscription that shows nothing was lost.
func (m *machine) finish(t *rapid.T) {
	quiet := rapid.IntRange(0, 2).Draw(t, "closeAsIs") != 0
	m.finishWith(t, quiet, rapid.Bool().Draw(t, "shutdownWithDoneContext"))
}

// finishWith ends a case: with a quiet phase first or not, and with Close
// or (abrupt) a shutdown whose context is done already.
func (m *machine) finishWith(t *rapid.T, quiet, abrupt bool) {
	if quiet {
		m.quietPhase(t)
	}
	m.close(t, abrupt)
	m.clearFaults()
	m.check(t)
	m.checkAckCount(t)
	m.drain(t)
	m.check(t)
}

// clearFaults ends every fault and stall.
func (m *machine) clearFaults() {
	m.env.input.release()
	m.env.handler.release()
	m.led.failExtensions(time.Time{})
	m.srv.StallStreams(false)
	m.srv.FailNext("Acknowledge", 0, codes.OK)
	m.srv.FailNext("ModifyAckDeadline", 0, codes.OK)
	m.srv.SetLatency("Acknowledge", 0)
	m.srv.SetLatency("ModifyAckDeadline", 0)
}

// quietPhase clears every fault and stall, publishes a few fresh messages
// and leaves the topology alone: it must then settle everything it was
// handed and take the fresh messages, within MaxLatency plus
// settleBound. Otherwise the failure says how it went wrong: messages it
// dropped without settling them, an input it stopped reading, or messages
// that never reached it.
func (m *machine) quietPhase(t *rapid.T) {
	m.clearFaults()
	m.step("quiet: every fault and stall cleared")
	m.led.mu.Lock()
	m.led.disturbed, m.led.quietSince = false, time.Now()
	m.led.mu.Unlock()
	m.settle()
	sizes := rapid.SliceOfN(rapid.IntRange(0, m.cfg.MaxPayload), 1, 5).Draw(t, "freshSizes")
	key := ""
	if m.opts.Ordered {
		key = "a"
	}
	m.doPublish(t, sizes, outAck, key, true)
	begin := time.Now()
	deadline := begin.Add(m.opts.MaxLatency + settleBound)
	for step := 100 * time.Millisecond; ; {
		m.check(t)
		unsettled, fresh := m.waiting()
		if len(unsettled) == 0 && len(fresh) == 0 {
			m.step("quiet after %v", time.Since(begin))
			return
		}
		if !time.Now().Before(deadline) {
			m.stuck(t, unsettled, fresh)
			return
		}
		time.Sleep(step)
		if time.Since(begin) > 10*time.Second {
			step = time.Second
		}
	}
}

// waiting returns the deliveries handed to the topology and not settled,
// and the fresh messages the topology has not settled once.
func (m *machine) waiting() (unsettled []*delivery, fresh []string) {
	l := m.led
	l.mu.Lock()
	defer l.mu.Unlock()
	settledOnce := map[string]bool{}
	for _, d := range l.all {
		if !d.handed {
			continue
		}
		if d.settleAt.IsZero() {
			unsettled = append(unsettled, d)
		} else {
			settledOnce[d.msgID] = true
		}
	}
	for id, p := range l.msgs {
		if p.fresh && !settledOnce[id] && !p.acked {
			fresh = append(fresh, id)
		}
	}
	return unsettled, fresh
}

// stuck reports why the quiet phase did not end.
func (m *machine) stuck(t *rapid.T, unsettled []*delivery, fresh []string) {
	blocked := m.env.blocked()
	c := m.counts()
	state := fmt.Sprintf("after %v of quiet: the topology was handed %d messages it has not settled (ids %s), %d fresh messages never settled by it (ids %s); the consumer holds %d, the server %+v",
		settleBound+m.opts.MaxLatency, len(unsettled), ids(unsettled), len(fresh), strings.Join(fresh, ", "), c.held, m.srv.SubscriptionStats(m.subName))
	switch {
	case blocked:
		m.fail(propStopped, "%s; the source has been waiting to hand the topology more: a stage (a branch?) stopped reading, and its backpressure stops everything:%s", state, describe(unsettled))
	case len(unsettled) > 0 && !m.env.closesOnStop():
		m.fail(propDropped, "%s; the topology waits for more input while it holds them unsettled: a stage dropped them without Ack or Nack (or holds them for ever):%s", state, describe(unsettled))
	case len(unsettled) > 0:
		m.fail(propSlow, "%s:%s", state, describe(unsettled))
	default:
		m.fail(propNeverHanded, "%s", state)
	}
}

// close shuts the consumer down with the run in whatever state it is, and
// checks invariant 7 (Close returns within its budget, with every goroutine
// of the library gone) and the end state of invariant 3.
func (m *machine) close(t *rapid.T, abrupt bool) {
	// A Subscriber's shutdown keeps its drain timeout, flush included,
	// within 1 s; a hand-built chain's flush may wait for slow or failing
	// acks (30 s at most) and its extender for modacks (5 s at most).
	budget := m.cfg.Drain + time.Second
	if m.faults && m.env.chain {
		budget += 35 * time.Second
	}
	// Close, or Shutdown with a context already done (no drain: nack
	// what is held, flush, stop, and still wait for every goroutine).
	m.step("close (abrupt: %v)", abrupt)
	ctx, cancel := context.WithCancel(context.Background())
	if abrupt {
		cancel()
	}
	defer cancel()
	begin := time.Now()
	done := make(chan error, 1)
	go func() { done <- m.closeConsumer(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(budget + time.Second):
		m.fail(invCloseSlow, "Close did not return within %v (drain timeout %v)", budget+time.Second, m.cfg.Drain)
	}
	took := time.Since(begin)
	// At the moment Close returns, no goroutine of the library may still
	// be blocked (waiting to be told to stop, or for a timer): only ones
	// on their way out (runnable) may remain.
	if blocked := blockedGoroutines(libraryGoroutines()); len(blocked) > 0 {
		m.fail(invCloseLeak, "%d goroutines blocked when Close returned:\n%s", len(blocked), strings.Join(blocked, "\n\n"))
	}
	// A goroutine that signalled its owner (WaitGroup.Done, a closed
	// channel) may still be on its way out when Close returns: let every
	// goroutine run until it blocks, without letting time pass. What is
	// left then is blocked (a leak) or waits for a timer (Close did not
	// wait for it): both break invariant 7.
	synctest.Wait()
	left := libraryGoroutines()
	if err != nil && !m.unflushed(err) {
		m.fail(invCloseError, "Close: %v", err)
	}
	if took > budget {
		m.fail(invCloseSlow, "Close took %v, budget %v (drain timeout %v)", took, budget, m.cfg.Drain)
	}
	if len(left) > 0 {
		m.fail(invCloseLeak, "%d goroutines:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	if err != nil && m.unflushed(err) {
		m.led.abandonUnflushed()
	}
	m.closed = true
	m.endTopology()
	m.checkClosed()
}

// endTopology ends the topology's part of the pipeline, which ends with
// its context, once the consumer is closed.
func (m *machine) endTopology() {
	m.env.input.release()
	m.env.handler.release()
	if r := m.run; r != nil {
		r.cancel()
		if err := m.waitErr(r.done, "the run to end after Close"); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, pubsubflow.ErrClosed) && !m.unflushed(err) {
			m.fail(propRunError, "run %d ended with %v after Close", r.n, err)
		}
		m.run = nil
	}
	m.settle()
}

// checkClosed checks what must hold once Close returned and the topology
// ended: nothing outstanding, leased or unsettled, and no goroutine left.
func (m *machine) checkClosed() {
	c := m.counts()
	if c.outstanding != 0 || c.outstandingBytes != 0 || c.leases != 0 {
		m.fail(invBalance, "after Close: %d outstanding (%d bytes), %d leases: %+v", c.outstanding, c.outstandingBytes, c.leases, c)
	}
	if c.received != c.settled || c.held != 0 {
		m.fail(invBalance, "after Close %d received, %d settled, %d held: %+v", c.received, c.settled, c.held, c)
	}
	ds := m.led.unsettled()
	if len(ds) > 0 {
		m.fail(invUnsettled, "%d deliveries (ids %s):%s", len(ds), ids(ds), describe(ds))
	}
	if left := leftGoroutines(); len(left) > 0 {
		m.fail(invLeftRunning, "%d goroutines:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// checkAckCount checks that the consumer counted as acked exactly what
// the server counted (invariant 8: an ack of a copy the server released
// is no ack). Call it once every ack is final, before the drain (whose
// acks the ledger sees too).
func (m *machine) checkAckCount(t *rapid.T) {
	c, wire := m.counts(), m.led.wireAcks()
	// Exact even when acks failed: a refused ack (FailInfo's
	// PERMISSION_DENIED, or one Close gave up) counts in AckRefused, not
	// Acked.
	if c.acked != uint64(wire) {
		m.fail(invAckCount, "Stats: %d acked, %d ack failures; %d ack ids acked on the wire (server: %+v)", c.acked, c.ackFailures, wire, m.srv.SubscriptionStats(m.subName))
	}
}

// drain acks everything left on the subscription with a fresh Subscriber
// (on the ledger, so its deliveries are checked too): whatever the
// consumer nacked, dropped or lost comes back to it.
func (m *machine) drain(t *rapid.T) {
	m.drainFrom = len(m.srv.Streams(m.subName))
	cfg := pubsubflow.SubscriberConfig{Client: m.led, StreamAckDeadline: 10 * time.Second}
	drain, err := pubsubflow.NewSubscriber(context.Background(), m.subName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	acked := func() int64 { return m.srv.SubscriptionStats(m.subName).Acked }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- drain.Run(ctx, 4, func(context.Context, *pubsubflow.Message) error { return nil })
	}()
	deadline := time.Now().Add(waitLimit)
	// Cancel only once Run's stream is open: Run cancelled before its
	// source started returns at once.
	for len(m.srv.Streams(m.subName)) == m.drainFrom && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for acked() < int64(m.published) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := m.waitErr(done, "the drain subscriber's Run"); err != nil {
		m.fail(propHang, "drain Run: %v", err)
	}
	if ss := m.srv.SubscriptionStats(m.subName); ss.Acked != int64(m.published) {
		m.fail(invLost, "%d of %d published messages acked after draining: %+v", ss.Acked, m.published, ss)
	}
}

// unflushed reports whether Close's error err only says that acks could
// not be flushed within the deadline, under faults, and Stats counted them
// as failures: the one error a bounded shutdown may return.
func (m *machine) unflushed(err error) bool {
	return m.faults && errors.Is(err, context.DeadlineExceeded) && m.counts().ackFailures > 0
}
