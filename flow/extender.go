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

// key names a lease: ack ids are only unique within a subscription, and one
// extender may serve several.
type key struct{ sub, ackID string }

// leaseState says what the extender is doing with a lease.
type leaseState uint8

const (
	stateReceipt  leaseState = iota // receipt modack queued or in flight
	stateIdle                       // waiting for its next extension
	stateBusy                       // an extension is in flight
	stateDropping                   // being settled as Expired; removed after
)

// lease is one tracked message. Guarded by Extender.mu, but for node and
// e, which are set before the lease is shared. It is the message's Holder:
// the message's settle path ends it.
type lease struct {
	node     message.HoldNode
	e        *Extender
	m        *source.Message
	key      key
	received time.Time
	size     int
	eo       bool
	state    leaseState
	// expiry is when the server's deadline passes as far as we know: the
	// stream ack deadline from receipt until the receipt modack succeeded,
	// then the send time of the last successful modack plus its deadline.
	// Taking the send time (not the reply time) errs on the early side.
	expiry time.Time
	// confirm (exactly-once only) is closed when the receipt modack is
	// confirmed or the lease ends; confirmDone records that it was.
	confirm     chan struct{}
	confirmDone bool
	// gone is set (under the extender's lock) when the lease leaves the
	// table, so its users need not look it up again by its key.
	gone bool
}

func (l *lease) endConfirm() {
	if l.confirm != nil && !l.confirmDone {
		l.confirmDone = true
		close(l.confirm)
	}
}

// Settled ends the lease of a message settled with anything but an ack
// (an extension after a nack would undo it). An acked message keeps its
// lease until its ack is final (Done), so a slow Acknowledge cannot let it
// lapse.
func (l *lease) Settled(_ any, o uint32) {
	if o != message.Ack {
		l.e.release(l, false)
	}
}

// Done ends the lease once the message's ack (or nack) is final; an ack
// teaches the adaptive deadline its receipt→ack latency.
func (l *lease) Done(any) { l.e.release(l, l.m.Outcome() == source.Ack) }

// Extender tracks the leases of received messages and keeps extending them
// until they are settled or pass the maximum extension. Make it with
// NewExtender and stop it with Close. One Extender may serve any number of
// sources, subscriptions and Subscribers: it extends each message on the
// subscription the message names. Its methods are safe for concurrent
// use; Track and Confirmed never wait for an RPC.
type Extender struct {
	client pubsubpb.SubscriberClient
	cfg    ExtenderConfig
	log    *slog.Logger
	events event.Func
	tracer *modackTracer // nil unless ExtenderConfig.TracerProvider is set

	// mu guards the fields below. It is never held across an RPC, a
	// channel wait, a timer or a call into a message's settle path.
	mu       sync.Mutex
	policy   policy
	leases   map[key]*lease
	pending  []*lease // receipt modacks not yet sent
	closed   bool
	deadline atomic.Int64 // the policy's deadline, for readers without mu

	extended atomic.Uint64
	expired  atomic.Uint64

	wake      chan struct{} // cap 1: Track queued a receipt modack
	jobs      chan job      // loop → workers, unbuffered
	quit      chan struct{} // closed by Close
	loopDone  chan struct{}
	workers   sync.WaitGroup
	rpcCtx    context.Context
	rpcCancel context.CancelFunc
	closeOnce sync.Once
}

// NewExtender validates cfg and starts the extender's loop and its
// MaxInFlight workers, which send ModifyAckDeadline through client.
func NewExtender(client pubsubpb.SubscriberClient, cfg ExtenderConfig) (*Extender, error) {
	if client == nil {
		return nil, errors.New("lease: nil SubscriberClient")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	e := &Extender{
		client:    client,
		cfg:       cfg,
		log:       cfg.Logger,
		policy:    cfg.Strategy.newPolicy(cfg.StreamAckDeadline),
		leases:    make(map[key]*lease),
		wake:      make(chan struct{}, 1),
		jobs:      make(chan job),
		quit:      make(chan struct{}),
		loopDone:  make(chan struct{}),
		rpcCtx:    ctx,
		rpcCancel: cancel,
	}
	e.events = e.emitEvent
	if cfg.TracerProvider != nil {
		e.tracer = &modackTracer{tp: cfg.TracerProvider}
	}
	e.deadline.Store(int64(ceilSeconds(e.policy.deadline())))
	e.workers.Add(cfg.MaxInFlight)
	for range cfg.MaxInFlight {
		go e.worker()
	}
	go e.loop()
	return e, nil
}

func keyOf(m *source.Message) key { return key{sub: m.Subscription, ackID: m.AckID} }

// track records the leases of a batch (a response's messages) on receipt
// (receipt time, size, deadline) and queues their receipt modacks, which
// set the strategy's deadline within a few milliseconds, batched with
// others: one lock and one allocation for the whole batch. It never waits
// for an RPC. A message without an ack id or a subscription, already
// settled or already tracked, or any message after Close, is ignored.
func (e *Extender) track(ms []*source.Message) {
	now := time.Now()
	slab := make([]lease, len(ms))
	added := 0
	e.mu.Lock()
	for i, m := range ms {
		if m == nil || m.AckID == "" || m.Subscription == "" || m.Settled() {
			continue
		}
		k := keyOf(m)
		if e.closed || e.leases[k] != nil {
			continue
		}
		received := m.ReceiveTime
		if received.IsZero() || received.After(now) {
			received = now
		}
		expiry := message.Of(m).Deadline()
		if expiry.IsZero() { // a message no source told the deadline of
			expiry = received.Add(e.cfg.StreamAckDeadline)
			message.Of(m).SetDeadline(expiry)
		}
		l := &slab[i]
		*l = lease{
			e:        e,
			m:        m,
			key:      k,
			received: received,
			size:     m.Size(),
			eo:       m.ExactlyOnce,
			state:    stateReceipt,
			expiry:   expiry,
		}
		if l.eo {
			l.confirm = make(chan struct{})
		}
		e.leases[k] = l
		e.pending = append(e.pending, l)
		added++
	}
	e.mu.Unlock()
	if added == 0 {
		return
	}
	// Outside mu: a message settled meanwhile ends its lease at once.
	for i := range slab {
		if l := &slab[i]; l.e != nil {
			message.Of(l.m).Hold(l.m, &l.node, l)
		}
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Confirmed tells whether m may be handed on. It returns nil when m's
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
	k := keyOf(m)
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.leases[k]
	if l == nil || l.m != m || l.confirmDone {
		return nil
	}
	return l.confirm
}

// release ends l (a no-op if it already ended); ack records its
// receipt→now latency for the adaptive strategy.
func (e *Extender) release(l *lease, ack bool) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.gone {
		return
	}
	e.removeLocked(l)
	if ack {
		e.policy.record(now.Sub(l.received))
		e.deadline.Store(int64(ceilSeconds(e.policy.deadline())))
	}
}

// Deadline is the deadline the strategy yields now, in whole seconds: what
// the stream should use as its ack deadline and what new leases get.
// Messages of exactly-once subscriptions get at least 60 s.
func (e *Extender) currentDeadline() time.Duration { return time.Duration(e.deadline.Load()) }

// Len is the number of leases held.
func (e *Extender) leaseCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.leases)
}

// Close stops the loop and the workers: no new RPC starts, retries stop,
// and RPCs in flight get up to CloseTimeout to finish before they are
// cancelled. It returns when every goroutine of the extender has exited.
// Leases still held are neither settled nor nacked: the owner (the
// Subscriber) nacks what it still holds before closing the extender.
func (e *Extender) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.quit)
		<-e.loopDone
		done := make(chan struct{})
		go func() {
			e.workers.Wait()
			close(done)
		}()
		t := time.NewTimer(e.cfg.CloseTimeout)
		select {
		case <-done:
		case <-t.C:
			e.rpcCancel()
			<-done
		}
		t.Stop()
		e.rpcCancel()
	})
	return nil
}

// deadlineFor is the deadline requested for l: the strategy's, and at
// least 60 s on exactly-once subscriptions. Called with mu held.
func (e *Extender) deadlineFor(l *lease, d time.Duration) time.Duration {
	if l.eo {
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

// removeLocked takes l out of the table.
func (e *Extender) removeLocked(l *lease) {
	delete(e.leases, l.key)
	l.gone = true
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
