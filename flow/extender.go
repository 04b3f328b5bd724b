package flow

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

type leaseState uint8

const (
	stateReceipt  leaseState = iota // receipt modack queued or in flight
	stateIdle                       // waiting for its next extension
	stateBusy                       // an extension is in flight
	stateDropping                   // being settled as Expired
	stateDropped
)

// lease is one tracked message, the message's Holder, in a per-response
// slab; its deadline is the message's own (message.State). Guarded by
// Extender.mu, but for node, e, received and eo, set before the lease is
// shared, and gone. Once gone, the sweep clears m (unless a drop is
// settling it), so a held message does not keep its response alive.
type lease struct {
	node     message.HoldNode
	e        *Extender
	m        *source.Message
	received int64 // unix nanoseconds
	// asked is when its last modack was queued (unix nanoseconds), secs
	// and receipt what it asked: a success moves the deadline to asked +
	// secs, on the early side.
	asked int64
	// confirm (exactly-once) is closed, and cleared, once the receipt
	// modack is confirmed or the lease ends.
	confirm chan struct{}
	secs    int32
	gone    atomic.Bool // the lease ended: the tick skips it
	state   leaseState
	receipt bool
	eo      bool
}

func (l *lease) endConfirm() {
	if l.confirm != nil {
		close(l.confirm)
		l.confirm = nil
	}
}

// Settled ends the lease of a message settled with anything but an ack
// (an extension would undo a nack). An acked message keeps its lease
// until its ack is final (Done): a slow Acknowledge cannot let it lapse.
func (l *lease) Settled(_ any, o uint32) {
	if o != message.Ack {
		l.e.release(l, false, time.Time{})
	}
}

// Done ends the lease once the message's ack (or nack) is final, at now;
// an ack teaches the adaptive deadline its receipt→ack latency.
func (l *lease) Done(m any, now time.Time) {
	l.e.release(l, message.Of(m).Outcome() == message.Ack, now)
}

// Extender tracks the leases of received messages and keeps extending them
// until they are settled or pass the maximum extension. Make it with
// NewExtender and stop it with Close. One Extender may serve any number of
// sources, subscriptions, connections and Subscribers, outliving every
// stream restart, and extends each message through its own source's
// client. Its methods are safe for concurrent use; leasing a message
// (EagerTrack) never waits for an RPC.
//
// A message's receipt ModifyAckDeadline, to the deadline the Strategy
// yields, is sent within a few milliseconds, batched with others. A loop
// then extends, with jitter, the leases that would expire before its next
// tick plus the margin, until the message is settled or past
// MaxExtension; then, or as soon as a deadline passes without a confirmed
// extension, the lease is dropped and the message settled as
// source.Expired (a modack that succeeds later does not revive it).
//
// On exactly-once subscriptions deadlines are at least 60 s, a message is
// handed on only once its receipt modack is confirmed, and one whose
// receipt modack fails, or whose ack id the server refuses for good, is
// dropped and settled as source.Expired.
type Extender struct {
	client pubsubpb.SubscriberClient
	cfg    ExtenderConfig
	policy *policy

	// mu guards the fields below. It is never held across an RPC, a
	// channel wait, a timer or a call into a message's settle path.
	mu sync.Mutex
	// slabs holds the batches of leases with a lease not yet gone (and
	// some with none, until the next sweep).
	slabs    [][]lease
	trimAt   int       // sweep when slabs is this long
	trimmed  int64     // when slabs was last swept (unix nanoseconds)
	pending  [][]lease // batches whose receipt modacks are not sent yet
	npending int
	closed   bool
	senders  map[senderKey]*sender

	extended, expired atomic.Uint64

	wake      chan struct{} // cap 1: track queued a receipt modack
	quit      chan struct{} // closed by Close
	loopDone  chan struct{}
	closeOnce sync.Once

	// stopped ends once the Extender can no longer keep the leases of the
	// pipelines that need it; its cause says why.
	stopped context.Context
	stop    context.CancelCauseFunc
}

// Why a pipeline that leases with an Extender (EagerTrack) ends: the
// Extender stopped keeping its leases, and the server would redeliver
// every message the pipeline holds, again and again, silently.
var (
	// ErrExtenderClosed: the Extender was closed while the pipeline ran.
	ErrExtenderClosed = errors.New("flow: Extender closed while a pipeline leases with it")
	// ErrModacksFailing: a source's modack requests failed for good (a
	// status that is not retried, such as NOT_FOUND) at least 5 times in
	// a row, over at least the stream ack deadline. The Extender stays
	// stopped for pipelines: once the cause is fixed, make a new one.
	ErrModacksFailing = errors.New("flow: Extender's modacks fail for good")
)

func (e *Extender) stoppedErr() error { return context.Cause(e.stopped) }

// NewExtender validates cfg and starts the extender's loop. client serves
// the messages no source received (built by hand).
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
		policy:   newPolicy(cfg.Strategy, cfg.StreamAckDeadline),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
		senders:  map[senderKey]*sender{},
	}
	e.stopped, e.stop = context.WithCancelCause(context.Background())
	go e.loop()
	return e, nil
}

// track leases a batch (a response's messages) and queues their receipt
// modacks: one lock and one allocation for the batch. A message without
// an ack id or a subscription, settled, or already tracked here, and any
// message after Close, is ignored.
func (e *Extender) track(ms []*source.Message) {
	now := time.Now()
	nowNs := now.UnixNano()
	slab := make([]lease, len(ms))
	added := 0
	for i, m := range ms {
		if m == nil || m.AckID == "" || m.Subscription == "" || message.Of(m).ExpireIfLate(m, now) {
			continue
		}
		received := m.ReceiveTime.UnixNano()
		if m.ReceiveTime.IsZero() || received > nowNs {
			received = nowNs
		}
		if st := message.Of(m); st.DeadlineNanos() == 0 { // no source told its deadline
			st.SetDeadline(time.Unix(0, received).Add(e.cfg.StreamAckDeadline), e.cfg.StreamAckDeadline)
		}
		l := &slab[i]
		l.e, l.m, l.received, l.state, l.eo = e, m, received, stateReceipt, m.ExactlyOnce
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
	e.slabs = append(e.slabs, slab)
	if len(e.slabs) >= e.trimAt || nowNs-e.trimmed >= int64(trimEvery) {
		e.sweepLocked(nowNs, nil)
	}
	e.pending = append(e.pending, slab)
	e.npending += len(slab)
	e.mu.Unlock()
	// Outside mu: a message settled meanwhile ends its lease at once.
	for i, m := range ms {
		if l := &slab[i]; l.e != nil {
			st := message.Of(m)
			if st.Hold(m, &l.node, l) && st.HeldBefore(&l.node, e.owns) {
				e.release(l, false, time.Time{}) // the older lease of m stays
			}
		}
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Extender) owns(h message.Holder) bool {
	l, ok := h.(*lease)
	return ok && l.e == e
}

// trimEvery bounds how long, while batches arrive, the slabs keep gone
// leases' messages and batches whose leases are all gone.
const trimEvery = 10 * time.Millisecond

// sweepLocked calls f (if not nil) for every live lease, forgets the
// messages of the gone ones (a slab lives as long as any of its messages,
// and must not keep the others' data) and drops the batches whose leases
// are all gone.
func (e *Extender) sweepLocked(now int64, f func(*lease)) {
	kept := e.slabs[:0]
	for _, s := range e.slabs {
		live := false
		for i := range s {
			switch l := &s[i]; {
			case l.e == nil:
			case !l.gone.Load():
				live = true
				if f != nil {
					f(l)
				}
			case l.state != stateDropping:
				l.m = nil
			}
		}
		if live {
			kept = append(kept, s)
		}
	}
	clear(e.slabs[len(kept):])
	e.slabs = kept
	e.trimAt = max(2*len(kept), 16)
	e.trimmed = now
}

// confirmed is nil when m may be handed on (its receipt modack is
// confirmed, it is not exactly-once, or e does not lease it: a dropped
// message is settled), else a channel closed when that changes.
func (e *Extender) confirmed(m *source.Message) <-chan struct{} {
	if m == nil || !m.ExactlyOnce {
		return nil
	}
	var l *lease
	message.Of(m).Holders(func(h message.Holder) bool {
		if e.owns(h) {
			l = h.(*lease)
		}
		return l == nil
	})
	if l == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.gone.Load() {
		return nil
	}
	return l.confirm
}

// release ends l (once); ack records its receipt→now latency for the
// adaptive strategy. No lock unless an exactly-once confirmation closes.
func (e *Extender) release(l *lease, ack bool, now time.Time) {
	if !l.gone.CompareAndSwap(false, true) {
		return
	}
	if l.eo {
		e.mu.Lock()
		l.endConfirm()
		e.mu.Unlock()
	}
	if ack {
		e.policy.record(time.Duration(now.UnixNano() - l.received))
	}
}

// currentDeadline is the deadline the strategy yields now: the stream's
// ack deadline and what new leases get.
func (e *Extender) currentDeadline() time.Duration { return ceilSeconds(e.policy.deadline()) }

// leaseCount counts the leases held (no counter on the hot path).
func (e *Extender) leaseCount() int {
	n := 0
	e.mu.Lock()
	e.sweepLocked(time.Now().UnixNano(), func(*lease) { n++ })
	e.mu.Unlock()
	return n
}

// Close stops the loop; modacks queued or in flight get up to
// CloseTimeout. It returns when every goroutine of the extender has
// exited. Leases still held are not settled: their owners nack them. A
// pipeline still leasing with it ends with ErrExtenderClosed.
func (e *Extender) Close() error {
	e.closeOnce.Do(func() {
		e.stop(ErrExtenderClosed)
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.quit)
		<-e.loopDone
		e.closeSenders(func(senderKey) bool { return true }, e.cfg.CloseTimeout)
	})
	return nil
}

// emit counts and logs what the extender reports.
func (e *Extender) emit(ev event.Event) {
	switch ev.Kind {
	case event.Extend:
		e.extended.Add(uint64(ev.Count))
	case event.Expired:
		e.expired.Add(uint64(ev.Count))
	}
	event.Log(e.cfg.Logger, ev)
	if e.cfg.events != nil {
		e.cfg.events(ev)
	}
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
