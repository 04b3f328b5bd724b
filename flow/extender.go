package flow

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

// leaseState says what the extender is doing with a lease.
type leaseState uint8

const (
	stateReceipt  leaseState = iota // receipt modack queued or in flight
	stateIdle                       // waiting for its next extension
	stateBusy                       // an extension is in flight
	stateDropping                   // being settled as Expired; removed after
)

// lease is one tracked message. Leases live in per-batch slabs (one
// allocation per response) that the extender keeps in a list, not in a
// table keyed by ack id: the message reaches its lease through its hold
// list, and the tick scans the slabs. Guarded by Extender.mu, but for
// node, e, m and received, which are set before the lease is shared, and
// gone, which is atomic. It is the message's Holder: the message's settle
// path ends it.
type lease struct {
	node     message.HoldNode
	e        *Extender
	m        *source.Message
	received int64 // unix nanoseconds
	// expiry is when the server's deadline passes as far as we know (unix
	// nanoseconds): the stream ack deadline from receipt until the receipt
	// modack succeeded, then the send time of the last successful modack
	// plus its deadline. Taking the send time (not the reply time) errs on
	// the early side.
	expiry int64
	// lapse is expiry less its settle margin (message.Margin): past it
	// the lease is dropped, and a late extension does not revive it.
	lapse int64
	// asked is when its last modack was queued (unix nanoseconds), secs
	// and receipt what it asked: a success makes the expiry asked + secs,
	// on the early side.
	asked int64
	// confirm (exactly-once only) is closed when the receipt modack is
	// confirmed or the lease ends.
	confirm chan struct{}
	secs    int32
	// gone is set once, when the lease ends (released, dropped): the
	// tick skips it and its slab is freed once all of the slab's are gone.
	gone    atomic.Bool
	state   leaseState
	receipt bool
	// confirmDone records that confirm was closed.
	confirmDone bool
	// (the small fields last, packed: 96 bytes a lease)
}

func (l *lease) endConfirm() {
	if l.confirm != nil && !l.confirmDone {
		l.confirmDone = true
		close(l.confirm)
	}
}

// eo reports whether the lease's message is on an exactly-once
// subscription.
func (l *lease) eo() bool { return l.m.ExactlyOnce }

// Settled ends the lease of a message settled with anything but an ack
// (an extension after a nack would undo it). An acked message keeps its
// lease until its ack is final (Done), so a slow Acknowledge cannot let it
// lapse.
func (l *lease) Settled(_ any, o uint32) {
	if o != message.Ack {
		l.e.release(l, false, time.Time{})
	}
}

// Done ends the lease once the message's ack (or nack) is final, at now;
// an ack teaches the adaptive deadline its receipt→ack latency.
func (l *lease) Done(_ any, now time.Time) { l.e.release(l, l.m.Outcome() == source.Ack, now) }

// Extender tracks the leases of received messages and keeps extending them
// until they are settled or pass the maximum extension. Make it with
// NewExtender and stop it with Close. One Extender may serve any number of
// sources, subscriptions, connections and Subscribers, and it outlives
// every stream restart: it extends each message through its own source,
// on the client (connection, server) and subscription it came from.
// Its methods are safe for concurrent use, and leasing a message
// (EagerTrack) never waits for an RPC.
//
// A message is leased on receipt (EagerTrack): its receipt
// ModifyAckDeadline, which sets the deadline the Strategy yields, is
// queued and sent within a few milliseconds, batched with others. A
// background loop then extends, with jitter, the leases that would expire
// before its next tick plus the margin (ExtenderConfig.Margin), until the
// message is settled or has been extended for ExtenderConfig.MaxExtension;
// then the lease is dropped, the message is settled as source.Expired and
// the server redelivers it. A lease whose deadline comes without a
// confirmed extension (failing modacks, a stalled process) is dropped the
// same way at once, and a modack that succeeds after that does not revive
// it.
//
// The modacks go out through a sender per source that serves this
// Extender alone, on that source's client, so a slow ack RPC of a source
// never delays an extension:
// requests are split at 1000 ack ids and 512 KiB, and transient failures
// are retried with backoff for up to ExtenderConfig.RetryDeadline.
//
// On exactly-once subscriptions deadlines are at least 60 s, a message is
// handed on only once its receipt modack has been confirmed (the
// tracker's Ready hook),
// and a message whose receipt modack fails, or whose ack id the server
// reports as failed for good, is dropped and settled as source.Expired.
// See Strategy for how the deadline is chosen.
type Extender struct {
	client pubsubpb.SubscriberClient
	cfg    ExtenderConfig
	log    *slog.Logger
	events event.Func
	tracer *modackTracer // nil unless ExtenderConfig.TracerProvider is set

	// mu guards the fields below. It is never held across an RPC, a
	// channel wait, a timer or a call into a message's settle path.
	mu     sync.Mutex
	policy policy
	// slabs holds every batch of leases with a lease not yet gone (and
	// some whose leases all are, until the next trim): what the tick
	// scans. A slab is dropped by the first trim (when the list has
	// doubled since the last, or at a tick) that finds all of its leases
	// gone, so the list holds O(live batches).
	slabs   [][]lease
	trimAt  int
	trimmed int64     // when the list was last trimmed (unix nanoseconds)
	pending [][]lease // batches whose receipt modacks are not sent yet
	closed  bool

	deadline atomic.Int64 // the policy's deadline, for readers without mu
	// learned is set when an ack taught the policy a latency since the
	// deadline was last read from it.
	learned atomic.Bool

	extended atomic.Uint64
	expired  atomic.Uint64

	// senders send the modacks, one acknowledger per source (and per
	// subscription for messages built by hand), under mu: the one sender
	// of deadline modifications, batching, splitting and retrying like a
	// source's acks, on the source's client; the extender's own, so a
	// slow ack RPC never delays an extension.
	senders  map[senderKey]*sender
	failures failures // modack failures not yet logged

	wake      chan struct{} // cap 1: track queued a receipt modack
	quit      chan struct{} // closed by Close
	loopDone  chan struct{}
	closeOnce sync.Once

	// stopped is closed once the Extender can no longer keep the leases
	// of the pipelines that need it (Close, or modacks failing for good);
	// stopErr says why (set before stopped is closed).
	stopped  chan struct{}
	stopErr  error
	stopOnce sync.Once
}

// Why a pipeline that leases with an Extender (EagerTrack) ends: the
// Extender stopped keeping its leases. Without them the server would
// redeliver every message the pipeline holds, again and again, silently.
var (
	// ErrExtenderClosed: the Extender was closed while the pipeline ran.
	ErrExtenderClosed = errors.New("flow: Extender closed while a pipeline leases with it")
	// ErrModacksFailing: a source's modacks have failed for good (a
	// status that is not retried, such as NOT_FOUND or
	// PERMISSION_DENIED, for whole requests) on every attempt for at
	// least the stream ack deadline, and at least failingRequests (5)
	// times. The Extender stays stopped for pipelines (those it still
	// holds leases for keep being extended as far as the server allows):
	// once the cause is fixed, make a new one.
	ErrModacksFailing = errors.New("flow: Extender's modacks fail for good")
)

// stop records why the Extender stopped serving pipelines (the first
// reason wins) and tells them (stopped).
func (e *Extender) stop(err error) {
	e.stopOnce.Do(func() {
		e.stopErr = err
		close(e.stopped)
	})
}

// stoppedErr says why the Extender stopped serving pipelines (nil while
// it serves them).
func (e *Extender) stoppedErr() error {
	select {
	case <-e.stopped:
		return e.stopErr
	default:
		return nil
	}
}

// NewExtender validates cfg and starts the extender's loop. A message a
// source received is extended through that source's client; client serves
// the messages no source received (built by hand). At most MaxInFlight
// modacks are in flight at once per source.
func NewExtender(client pubsubpb.SubscriberClient, cfg ExtenderConfig) (*Extender, error) {
	if client == nil {
		return nil, errors.New("flow: nil SubscriberClient")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Extender{
		client:   client,
		cfg:      cfg,
		log:      cfg.Logger,
		policy:   cfg.Strategy.newPolicy(cfg.StreamAckDeadline),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
		stopped:  make(chan struct{}),
		senders:  map[senderKey]*sender{},
	}
	e.events = e.emitEvent
	if cfg.TracerProvider != nil {
		e.tracer = &modackTracer{tp: cfg.TracerProvider}
	}
	e.deadline.Store(int64(ceilSeconds(e.policy.deadline())))
	go e.loop()
	return e, nil
}

// track records the leases of a batch (a response's messages) on receipt
// (receipt time, deadline) and queues their receipt modacks, which set the
// strategy's deadline within a few milliseconds, batched with others: one
// lock and one allocation for the whole batch, and no table: each lease is
// found through its message. It never waits for an RPC. A message without
// an ack id or a subscription, already settled or already tracked by this
// extender, or any message after Close, is ignored.
func (e *Extender) track(ms []*source.Message) {
	now := time.Now()
	nowNs := now.UnixNano()
	slab := make([]lease, len(ms))
	added := 0
	for i, m := range ms {
		if m == nil || m.AckID == "" || m.Subscription == "" || message.Of(m).ExpireIfLate(m, now) {
			continue
		}
		st := message.Of(m)
		received := m.ReceiveTime.UnixNano()
		if m.ReceiveTime.IsZero() || received > nowNs {
			received = nowNs
		}
		expiry := st.DeadlineNanos()
		if expiry == 0 { // a message no source told the deadline of
			expiry = received + int64(e.cfg.StreamAckDeadline)
			st.SetDeadline(time.Unix(0, expiry), e.cfg.StreamAckDeadline)
		}
		l := &slab[i]
		l.e, l.m, l.received, l.expiry, l.state = e, m, received, expiry, stateReceipt
		l.lapse = st.LapseAt().UnixNano()
		if m.ExactlyOnce {
			l.confirm = make(chan struct{})
		}
		added++
	}
	if added == 0 {
		return
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.addSlabLocked(slab, nowNs)
	e.pending = append(e.pending, slab)
	e.mu.Unlock()
	// Outside mu: a message settled meanwhile ends its lease at once.
	for i := range slab {
		l := &slab[i]
		if l.e == nil {
			continue
		}
		st := message.Of(l.m)
		if st.Hold(l.m, &l.node, l) && st.HeldBefore(&l.node, e.owns) {
			// Already tracked here (the same message twice): the older
			// lease stays, this one ends.
			e.release(l, false, time.Time{})
		}
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// owns reports whether h is a lease of e.
func (e *Extender) owns(h message.Holder) bool {
	l, ok := h.(*lease)
	return ok && l.e == e
}

// addSlabLocked adds a batch's leases to the list the tick scans,
// dropping the batches whose leases are all gone whenever the list has
// doubled since it was last trimmed (amortized O(1) per batch) or
// trimEvery has passed: a batch whose leases are gone still points at its
// messages, and holding them (their data) longer than that would grow the
// heap with the throughput.
func (e *Extender) addSlabLocked(slab []lease, now int64) {
	e.slabs = append(e.slabs, slab)
	if len(e.slabs) >= e.trimAt || now-e.trimmed >= int64(trimEvery) {
		e.trimLocked(now)
	}
}

// trimEvery bounds how long the lease list keeps batches whose leases are
// all gone while batches keep arriving.
const trimEvery = 10 * time.Millisecond

func (e *Extender) trimLocked(now int64) {
	kept := e.slabs[:0]
	for _, s := range e.slabs {
		if !allGone(s) {
			kept = append(kept, s)
		}
	}
	clear(e.slabs[len(kept):])
	e.slabs = kept
	e.trimAt = max(2*len(kept), 16)
	e.trimmed = now
}

func allGone(s []lease) bool {
	for i := range s {
		if l := &s[i]; l.e != nil && !l.gone.Load() {
			return false
		}
	}
	return true
}

// leaseOf returns e's lease of m, found through m's hold list (nil if
// e does not hold m).
func (e *Extender) leaseOf(m *source.Message) *lease {
	var found *lease
	message.Of(m).Holders(func(h message.Holder) bool {
		if l, ok := h.(*lease); ok && l.e == e {
			found = l
			return false
		}
		return true
	})
	return found
}

// confirmed tells whether m may be handed on. It returns nil when m's
// receipt modack has been confirmed, when m's subscription is not
// exactly-once, or when m is not tracked (never, or no longer: released,
// expired, or dropped because its receipt modack failed permanently, in
// which case the extender has settled it as message.Expired and emitted
// event.ReceiptModackFail). Otherwise it returns a channel that is closed
// when that changes.
func (e *Extender) confirmed(m *source.Message) <-chan struct{} {
	if m == nil || !m.ExactlyOnce {
		return nil
	}
	l := e.leaseOf(m)
	if l == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.gone.Load() || l.confirmDone {
		return nil
	}
	return l.confirm
}

// release ends l (a no-op if it already ended); ack records its
// receipt→now latency for the adaptive strategy. No lock unless the lease
// has an exactly-once confirmation to close.
func (e *Extender) release(l *lease, ack bool, now time.Time) {
	if !l.gone.CompareAndSwap(false, true) {
		return
	}
	if l.confirm != nil {
		e.mu.Lock()
		l.endConfirm()
		e.mu.Unlock()
	}
	if ack {
		if now.IsZero() {
			now = time.Now()
		}
		e.policy.record(time.Duration(now.UnixNano() - l.received))
		if !e.learned.Load() {
			e.learned.Store(true)
		}
	}
}

// currentDeadline is the deadline the strategy yields now, in whole seconds: what
// the stream should use as its ack deadline and what new leases get.
// Messages of exactly-once subscriptions get at least 60 s.
func (e *Extender) currentDeadline() time.Duration {
	if e.learned.Load() && e.learned.Swap(false) {
		e.mu.Lock()
		e.deadline.Store(int64(ceilSeconds(e.policy.deadline())))
		e.mu.Unlock()
	}
	return time.Duration(e.deadline.Load())
}

// leaseCount is the number of leases held, counted (no counter is kept on the
// hot path): O(leases), for Stats.
func (e *Extender) leaseCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.slabs {
		for i := range s {
			if l := &s[i]; l.e != nil && !l.gone.Load() {
				n++
			}
		}
	}
	return n
}

// Close stops the loop: no new modack is queued; those queued or in
// flight get up to CloseTimeout to finish before they are abandoned. It
// returns when every goroutine of the extender has exited. Leases still
// held are neither settled nor nacked: the owner (the source, the
// Subscriber) nacks what it still holds. A pipeline still leasing with it
// (EagerTrack) ends with ErrExtenderClosed.
func (e *Extender) Close() error {
	e.closeOnce.Do(func() {
		e.stop(ErrExtenderClosed)
		e.mu.Lock()
		e.closed = true
		senders := e.senders
		e.senders = nil
		e.mu.Unlock()
		close(e.quit)
		<-e.loopDone
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CloseTimeout)
		defer cancel()
		for _, sd := range senders {
			_ = sd.a.Close(ctx) // what could not be sent is of no use any more
		}
	})
	return nil
}

// deadlineFor is the deadline requested for l: the strategy's, and at
// least 60 s on exactly-once subscriptions. Called with mu held.
func (e *Extender) deadlineFor(l *lease, d time.Duration) time.Duration {
	if l.eo() {
		d = max(d, exactlyOnceMinDeadline)
	}
	return min(ceilSeconds(d), maxDeadline)
}

// margin is the safety margin in effect for deadline d.
func (e *Extender) margin(d time.Duration) time.Duration {
	return min(e.cfg.Margin, d/2)
}

func (e *Extender) emit(ev event.Event) { e.events.Emit(ev) }

// emitEvent counts and logs what the extender reports.
func (e *Extender) emitEvent(ev event.Event) {
	switch ev.Kind {
	case event.Extend:
		e.extended.Add(uint64(ev.Count))
	case event.Expired:
		e.expired.Add(uint64(ev.Count))
	}
	event.Log(e.log, ev)
	if e.cfg.events != nil {
		e.cfg.events(ev)
	}
}

// removeLocked ends l if it has not ended: it leaves the tick's scan.
func (e *Extender) removeLocked(l *lease) {
	l.gone.Store(true)
	l.endConfirm()
}

// ExtenderStats is a snapshot of an Extender.
type ExtenderStats struct {
	Leases   int           // leases held now
	Extended uint64        // lease extensions the server accepted
	Expired  uint64        // leases dropped: past max extension, or their deadline passed unconfirmed
	Deadline time.Duration // the deadline the strategy yields now
}

// Stats returns a snapshot of the extender's counters.
func (e *Extender) Stats() ExtenderStats {
	return ExtenderStats{Leases: e.leaseCount(), Extended: e.extended.Load(), Expired: e.expired.Load(), Deadline: e.currentDeadline()}
}
