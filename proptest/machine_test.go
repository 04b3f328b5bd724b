package proptest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// machineChecks is the CI default of TestSubscriberMachine's cases; each
// runs about 30 actions (rapid's -rapid.steps) in virtual time.
const machineChecks = 300

// Attribute values that tell the handler what to do with a message.
const (
	attrOutcome = "outcome"
	outAck      = "ack"      // return nil: OnSuccess acks
	outNack     = "nack"     // return an error on the first delivery: OnFailure nacks
	outSelfAck  = "self-ack" // m.Ack() inside the handler, then return nil
)

// waitLimit bounds every wait of the machine in virtual time; a wait that
// reaches it is a failure (a hang), never a pass.
const waitLimit = 10 * time.Minute

// TestSubscriberMachine is the end-to-end state machine: a real Subscriber
// against pubsubtest over bufconn, in virtual time, driven by random
// actions, with the invariants checked after every step (see machine.check)
// and at the end (machine.finish).
func TestSubscriberMachine(t *testing.T) {
	logFirstFailure(t)
	var total tally
	check(t, machineChecks, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := newMachine(rt, drawMachineConfig(rt))
			defer m.teardown()
			rt.Repeat(m.actions())
			m.finish(rt)
			total.add(m)
		})
	})
	t.Logf("over all cases: %+v", total)
}

// tally sums what the cases did, to show in -v output that the machine
// reaches the states it is meant to test.
type tally struct {
	Cases, Published, Deliveries, Redeliveries, Kills, Reruns, Stalls int
	Streams                                                           int
	VirtualTime                                                       time.Duration
}

func (t *tally) add(m *machine) {
	ss := m.srv.SubscriptionStats(m.subName)
	t.Cases++
	t.Published += m.published
	t.Deliveries += int(ss.Delivered)
	t.Redeliveries += int(ss.Redelivered)
	t.Kills += m.kills
	t.Reruns += m.reruns
	t.Stalls += m.stalls
	t.Streams += int(ss.Streams)
	t.VirtualTime += time.Since(m.start)
}

// machine is the state of one case: the server, the subscriber under test,
// the ledger (the model of what the client holds), the current run, and the
// faults in force.
type machine struct {
	t   *rapid.T
	srv *pubsubtest.Server
	led *ledger
	sub *pubsubflow.Subscriber
	cfg pubsubflow.SubscriberConfig

	topic, subName string
	maxPayload     int
	maxPerResponse int
	published      int
	hold           hold
	run            *run
	closed         bool
	drainFrom      int  // streams opened before the drain subscriber started
	faults         bool // an RPC fault was injected at some point
	lastFault      map[string]time.Time
	start          time.Time
	kills, reruns  int
	stalls         int

	mu      sync.Mutex
	handled map[string]int // ack id → handler calls
}

// run is one pipeline from the subscriber's Source through Process to
// Acknowledge, with its own context: stopping it and starting the next
// one is "change the parallelism of the next run".
type run struct {
	parallelism int
	cancel      context.CancelFunc
	done        chan error
}

// machineConfig is what a case draws before its first action.
type machineConfig struct {
	MaxPerResponse int
	MaxPayload     int
	Streams        int
	Limit          int64 // MaxOutstandingMessages
	Bytes          int64 // MaxOutstandingBytes
	AckDeadline    time.Duration
	Heartbeat      time.Duration
	Drain          time.Duration
	Parallelism    int
}

func drawMachineConfig(t *rapid.T) machineConfig {
	return machineConfig{
		MaxPerResponse: rapid.IntRange(1, 100).Draw(t, "maxPerResponse"),
		MaxPayload:     rapid.SampledFrom([]int{0, 64, 1024, 8192}).Draw(t, "maxPayload"),
		Streams:        rapid.IntRange(1, 3).Draw(t, "streams"),
		Limit:          rapid.Int64Range(1, 12).Draw(t, "maxOutstandingMessages"),
		Bytes:          rapid.SampledFrom([]int64{pubsubflow.Unlimited, 2000, 20000}).Draw(t, "maxOutstandingBytes"),
		AckDeadline:    rapid.SampledFrom([]time.Duration{10 * time.Second, 20 * time.Second, 60 * time.Second}).Draw(t, "streamAckDeadline"),
		Heartbeat:      rapid.SampledFrom([]time.Duration{time.Second, 5 * time.Second, 30 * time.Second}).Draw(t, "heartbeatInterval"),
		Drain:          time.Duration(rapid.IntRange(1, 30).Draw(t, "drainTimeoutSeconds")) * time.Second,
		Parallelism:    rapid.IntRange(1, 4).Draw(t, "parallelism"),
	}
}

func newMachine(t *rapid.T, mc machineConfig) *machine {
	srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn(), pubsubtest.WithRecordStreamRequests(), pubsubtest.WithDeliveryAttemptAlways(),
		pubsubtest.WithMaxMessagesPerResponse(mc.MaxPerResponse))
	if err != nil {
		t.Fatal(err)
	}
	m := &machine{t: t, srv: srv, handled: map[string]int{}, lastFault: map[string]time.Time{}, start: time.Now()}
	ctx := context.Background()
	if m.topic, err = srv.CreateTopic(ctx, "topic"); err != nil {
		t.Fatal(err)
	}
	if m.subName, err = srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: m.topic}); err != nil {
		t.Fatal(err)
	}
	m.maxPayload, m.maxPerResponse = mc.MaxPayload, mc.MaxPerResponse
	m.cfg = pubsubflow.SubscriberConfig{
		Streams:                mc.Streams,
		MaxOutstandingMessages: mc.Limit,
		MaxOutstandingBytes:    mc.Bytes,
		StreamAckDeadline:      mc.AckDeadline,
		HeartbeatInterval:      mc.Heartbeat,
		DrainTimeout:           mc.Drain,
		OnShutdown:             pubsubflow.Nack,
		// Short reconnect delays keep a case within its time.
		Backoff: gax.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second},
	}
	m.led = newLedger(pubsubpb.NewSubscriberClient(srv.ClientConn()))
	cfg := m.cfg
	cfg.Client = m.led
	if m.sub, err = pubsubflow.NewSubscriber(ctx, m.subName, cfg); err != nil {
		t.Fatal(err)
	}
	m.startRun(mc.Parallelism)
	return m
}

// teardown releases everything, whatever state a failure left: the
// bubble must end with no goroutine.
func (m *machine) teardown() {
	m.hold.release()
	m.srv.StallStreams(false)
	if m.run != nil {
		m.run.cancel()
	}
	if m.sub != nil {
		_ = m.sub.Close()
	}
	if m.run != nil {
		<-m.run.done
	}
	_ = m.srv.Close()
	// A goroutine that outlives Close (a fault the case may have just
	// reported) would end the bubble with a deadlock panic that hides the
	// report: give stragglers virtual time to finish first.
	for range 120 {
		if len(subscriberGoroutines()) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
}

func (m *machine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"":             m.check,
		"Publish":      m.publish,
		"Stall":        m.stall,
		"Release":      m.release,
		"FailAcks":     m.failAcks,
		"FailModacks":  m.failModacks,
		"DelayAcks":    m.delayAcks,
		"DelayModacks": m.delayModacks,
		"KillStreams":  m.killStreams,
		"StallStreams": m.stallStreams,
		"Advance":      m.advance,
		"Rerun":        m.rerun,
	}
}

// --- actions ---

func (m *machine) publish(t *rapid.T) {
	sizes := rapid.SliceOfN(rapid.IntRange(0, m.maxPayload), 1, 40).Draw(t, "sizes")
	outcome := rapid.SampledFrom([]string{outAck, outAck, outNack, outSelfAck}).Draw(t, "outcome")
	m.doPublish(t, sizes, outcome)
}

func (m *machine) doPublish(t *rapid.T, sizes []int, outcome string) {
	msgs := make([]*pubsubpb.PubsubMessage, len(sizes))
	for i, n := range sizes {
		msgs[i] = &pubsubpb.PubsubMessage{
			Data:       make([]byte, n),
			Attributes: map[string]string{attrOutcome: outcome, "n": strconv.Itoa(m.published + i)},
		}
	}
	if _, err := m.srv.Publish(context.Background(), m.topic, msgs...); err != nil {
		t.Fatal(err)
	}
	m.published += len(msgs)
	m.settle()
}

func (m *machine) stall(*rapid.T)   { m.hold.stall(); m.stalls++; m.settle() }
func (m *machine) release(*rapid.T) { m.hold.release(); m.settle() }

// Faults are bounded so that the invariants must hold under them: the
// lease extender's safety margin (5 s) covers "the RPC's latency and a
// retry or two" (flow.DefaultMargin), so at most 2 failures of 1 s each
// plus backoff may hit one extension. A fault takes effect only if the
// method had none injected for faultCooldown, so that two injections never
// stack on one retrying request; otherwise the action does nothing.
const faultCooldown = 30 * time.Second

func (m *machine) inject(method string, f func()) {
	if last, ok := m.lastFault[method]; ok && time.Since(last) < faultCooldown {
		return
	}
	m.lastFault[method] = time.Now()
	f()
	m.faults = true
	m.settle()
}

func (m *machine) failAcks(t *rapid.T) { m.doFailAcks(rapid.IntRange(1, 3).Draw(t, "n")) }

func (m *machine) doFailAcks(n int) {
	m.inject("Acknowledge", func() { m.srv.FailNext("Acknowledge", n, codes.Unavailable) })
}

func (m *machine) failModacks(t *rapid.T) { m.doFailModacks(rapid.IntRange(1, 2).Draw(t, "n")) }

func (m *machine) doFailModacks(n int) {
	m.inject("ModifyAckDeadline", func() { m.srv.FailNext("ModifyAckDeadline", n, codes.Unavailable) })
}

func (m *machine) delayAcks(t *rapid.T) {
	m.doDelay("Acknowledge", rapid.SampledFrom([]time.Duration{0, 100 * time.Millisecond, time.Second, 3 * time.Second}).Draw(t, "latency"))
}

func (m *machine) delayModacks(t *rapid.T) {
	m.doDelay("ModifyAckDeadline", rapid.SampledFrom([]time.Duration{0, 100 * time.Millisecond, time.Second}).Draw(t, "latency"))
}

func (m *machine) doDelay(method string, d time.Duration) {
	m.inject(method, func() { m.srv.SetLatency(method, d) })
}

func (m *machine) killStreams(*rapid.T) {
	m.kills += m.srv.KillStreams(codes.Unavailable, "proptest: stream killed")
	m.settle()
}

func (m *machine) stallStreams(t *rapid.T) { m.doStallStreams(rapid.Bool().Draw(t, "stalled")) }

func (m *machine) doStallStreams(stalled bool) {
	m.srv.StallStreams(stalled)
	m.settle()
}

func (m *machine) advance(t *rapid.T) {
	m.doAdvance(time.Duration(rapid.IntRange(1, 20000).Draw(t, "ms")) * time.Millisecond)
}

func (m *machine) doAdvance(d time.Duration) {
	time.Sleep(d)
	m.settle()
}

func (m *machine) rerun(t *rapid.T) { m.doRerun(rapid.IntRange(1, 4).Draw(t, "parallelism")) }

func (m *machine) doRerun(p int) {
	if m.closed {
		return
	}
	m.stopRun()
	m.reruns++
	m.startRun(p)
	m.settle()
}

// fail ends the case with a stable message, what, after logging the
// details. rapid shrinks a case only while it fails with the same message,
// and the details (ids, times, counts) change from run to run.
func fail(t *rapid.T, what, format string, args ...any) {
	t.Helper()
	detail := fmt.Sprintf(format, args...)
	firstFailure.CompareAndSwap(nil, &detail)
	t.Logf("%s", detail)
	t.Fatal(what)
}

// firstFailure keeps the details of the first failure of a test: when
// rapid cannot reproduce a case step for step it prints only the message,
// and the details are what explains it.
var firstFailure atomic.Pointer[string]

// logFirstFailure reports firstFailure when t fails.
func logFirstFailure(t *testing.T) {
	firstFailure.Store(nil)
	t.Cleanup(func() {
		if d := firstFailure.Load(); t.Failed() && d != nil {
			t.Logf("details of the first failure: %s", *d)
		}
	})
}

// settle lets the subscriber react: every goroutine of the bubble runs
// until it blocks (virtual time does not move).
func (m *machine) settle() { synctest.Wait() }

// --- runs ---

func (m *machine) startRun(p int) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{parallelism: p, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- pipeline.FromContext(ctx, m.sub.Source()).Via(m.sub.Process(p, m.handle)).To(m.sub.Acknowledge())
	}()
	m.run = r
}

// stopRun cancels the current run and waits for its pipeline to return.
func (m *machine) stopRun() {
	r := m.run
	m.run = nil
	r.cancel()
	if err := m.waitErr(r.done, "the run's pipeline to stop"); err != nil && !errors.Is(err, context.Canceled) {
		fail(m.t, "a stopped run ended with an error", "run (parallelism %d) ended with %v", r.parallelism, err)
	}
	// Receipt modacks of what was tracked go out within milliseconds;
	// what is still untracked then was dropped by the stop.
	time.Sleep(50 * time.Millisecond)
	m.led.stopped()
	m.settle()
}

// handle is the handler: it waits while the hold is stalled, then does
// what the message's outcome attribute says.
func (m *machine) handle(ctx context.Context, msg *pubsubflow.Message) error {
	m.mu.Lock()
	m.handled[msg.AckID]++
	m.mu.Unlock()
	if err := m.hold.wait(ctx); err != nil {
		return err
	}
	switch msg.Attributes[attrOutcome] {
	case outNack:
		if msg.DeliveryAttempt <= 1 {
			return errors.New("proptest: nack the first delivery")
		}
	case outSelfAck:
		msg.Ack()
	}
	return nil
}

// waitErr waits for ch in virtual time, failing after waitLimit.
func (m *machine) waitErr(ch <-chan error, what string) error {
	select {
	case err := <-ch:
		return err
	case <-time.After(waitLimit):
		fail(m.t, "hang: "+what, "waited %v for %s", waitLimit, what)
		return nil
	}
}

// --- close ---

// close shuts the subscriber down with the run in whatever state it is,
// and checks invariant 7 (Close returns within its budget, with every
// goroutine of the subscriber gone) and the end state of invariant 3.
func (m *machine) close(t *rapid.T) {
	budget := m.cfg.DrainTimeout + time.Second
	if m.faults {
		// The final flush may wait for slow or failing acks (30 s at most)
		// and the extender for its in-flight modacks (5 s at most).
		budget += 35 * time.Second
	}
	// Close, or Shutdown with a context already done (no drain: nack
	// what is held, flush, stop, and still wait for every goroutine).
	abrupt := rapid.Bool().Draw(t, "shutdownWithDoneContext")
	begin := time.Now()
	done := make(chan error, 1)
	go func() {
		if abrupt {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := m.sub.Shutdown(ctx)
			if errors.Is(err, context.Canceled) {
				err = nil // the done context is no failure of the shutdown
			}
			done <- err
			return
		}
		done <- m.sub.Close()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(budget + time.Second):
		fail(t, "invariant 7: Close did not return within its budget", "Close did not return within %v (drain timeout %v)", budget+time.Second, m.cfg.DrainTimeout)
	}
	took := time.Since(begin)
	// At the moment Close returns, no goroutine of the subscriber may still
	// be blocked (waiting to be told to stop, or for a timer): only ones on
	// their way out (runnable) may remain.
	if blocked := blockedGoroutines(subscriberGoroutines()); len(blocked) > 0 {
		fail(t, "invariant 7: goroutines of the subscriber still blocked when Close returned", "%d goroutines:\n%s", len(blocked), strings.Join(blocked, "\n\n"))
	}
	// A goroutine that signalled its owner (WaitGroup.Done, a closed
	// channel) may still be on its way out when Close returns: let every
	// goroutine run until it blocks, without letting time pass. What is
	// left then is blocked (a leak) or waits for a timer (Close did not
	// wait for it): both break invariant 7.
	synctest.Wait()
	left := subscriberGoroutines()
	if err != nil {
		fail(t, "Close returned an error", "Close: %v", err)
	}
	if took > budget {
		fail(t, "invariant 7: Close took longer than its budget", "Close took %v, budget %v (drain timeout %v)", took, budget, m.cfg.DrainTimeout)
	}
	if len(left) > 0 {
		fail(t, "invariant 7: goroutines of the subscriber still running when Close returned", "%d goroutines:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	m.closed = true
	// The user's part of the pipeline (workers, sink) ends with its context.
	m.hold.release()
	if m.run != nil {
		m.run.cancel()
		if err := m.waitErr(m.run.done, "the run's pipeline to end after Close"); err != nil && !errors.Is(err, context.Canceled) {
			fail(t, "the run ended with an error after Close", "run ended with %v after Close", err)
		}
		m.run = nil
	}
	time.Sleep(50 * time.Millisecond)
	m.led.stopped()
	m.settle()

	st := m.sub.Stats()
	settled := st.Acked + st.Nacked + st.NoOps + st.Expired
	if st.Outstanding != 0 || st.OutstandingBytes != 0 || st.Leases != 0 {
		fail(t, "invariant 3: after Close permits or leases are not zero", "stats after Close: %+v", st)
	}
	if lost := int64(st.Received - settled); lost != 0 || st.Processing != 0 || st.Buffered != lost {
		fail(t, "invariant 3: after Close received and settled do not balance", "after Close %d received, %d settled (acked %d, nacked %d, no-op %d, expired %d), buffered %d, processing %d",
			st.Received, settled, st.Acked, st.Nacked, st.NoOps, st.Expired, st.Buffered, st.Processing)
	}
	for _, d := range m.led.unsettled() {
		fail(t, "invariant 3: after Close a delivery the client received was never settled", "%v", d)
	}
}

// finish closes the subscriber in whatever state the actions left, then drains the
// subscription with a fresh subscriber and checks that every published
// message was acked (nothing was lost) and the model's end state.
func (m *machine) finish(t *rapid.T) {
	m.close(t) // as things are: handler stalled or not, faults in force
	m.srv.StallStreams(false)
	m.srv.FailNext("Acknowledge", 0, codes.OK)
	m.srv.FailNext("ModifyAckDeadline", 0, codes.OK)
	m.srv.SetLatency("Acknowledge", 0)
	m.srv.SetLatency("ModifyAckDeadline", 0)
	m.check(t)

	// Drain: a second subscriber acks everything left; whatever the first
	// one nacked or lost comes back to it.
	m.drainFrom = len(m.srv.Streams(m.subName))
	cfg := pubsubflow.SubscriberConfig{Client: m.led, StreamAckDeadline: 10 * time.Second}
	drain, err := pubsubflow.NewSubscriber(context.Background(), m.subName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- drain.Run(ctx, 4, m.handle) }()
	deadline := time.Now().Add(waitLimit)
	// Cancel only once Run's stream is open: Run cancelled before its
	// source started returns ErrClosed (see TestRunCancelledEarly).
	for len(m.srv.Streams(m.subName)) == m.drainFrom && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for m.srv.SubscriptionStats(m.subName).Acked < int64(m.published) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := m.waitErr(done, "the drain subscriber's Run"); err != nil {
		fail(t, "the drain subscriber's Run failed", "drain Run: %v", err)
	}
	ss := m.srv.SubscriptionStats(m.subName)
	if ss.Acked != int64(m.published) {
		fail(t, "invariants 3/6: not every published message was acked after draining", "%d of %d published messages acked after draining: %+v", ss.Acked, m.published, ss)
	}
	m.check(t)
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, n := range m.handled {
		if n > 1 {
			fail(t, "invariant 3: an ack id was handled twice", "ack id %s handled %d times", id, n)
		}
	}
}

// String describes the machine for failure messages.
func (m *machine) String() string {
	return fmt.Sprintf("config %+v, published %d", m.cfg, m.published)
}
