package flow

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
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

// lease is one tracked message. Guarded by Extender.mu.
type lease struct {
	m        *message.Message
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

// Extender tracks the leases of received messages and keeps extending them
// until they are released or pass the maximum extension. Make it with
// NewExtender and stop it with Close. Its methods are safe for concurrent
// use; Track, Release and Confirmed never wait for an RPC.
type Extender struct {
	client pubsubpb.SubscriberClient
	sub    string
	cfg    ExtenderConfig
	log    *slog.Logger
	events event.Func

	// mu guards the fields below. It is never held across an RPC, a
	// channel wait, a timer or a call into a message's settle path.
	mu      sync.Mutex
	policy  policy
	leases  map[key]*lease
	pending []*lease // receipt modacks not yet sent
	closed  bool

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
// MaxInFlight workers. subscription is the full subscription name used for
// messages whose Subscription field is empty; a message that names its
// subscription is extended on that one, so an extender can be shared.
func NewExtender(client pubsubpb.SubscriberClient, subscription string, cfg ExtenderConfig) (*Extender, error) {
	if client == nil {
		return nil, errors.New("lease: nil SubscriberClient")
	}
	if subscription == "" {
		return nil, errors.New("lease: empty subscription name")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	e := &Extender{
		client:    client,
		sub:       subscription,
		cfg:       cfg,
		log:       cfg.Logger,
		events:    cfg.Events,
		policy:    cfg.Strategy.newPolicy(cfg.StreamAckDeadline),
		leases:    make(map[key]*lease),
		wake:      make(chan struct{}, 1),
		jobs:      make(chan job),
		quit:      make(chan struct{}),
		loopDone:  make(chan struct{}),
		rpcCtx:    ctx,
		rpcCancel: cancel,
	}
	e.workers.Add(cfg.MaxInFlight)
	for range cfg.MaxInFlight {
		go e.worker()
	}
	go e.loop()
	return e, nil
}

func (e *Extender) keyOf(m *message.Message) key {
	sub := m.Subscription
	if sub == "" {
		sub = e.sub
	}
	return key{sub: sub, ackID: m.AckID}
}

// Track records m's lease on receipt (receipt time, size, deadline) and
// queues its receipt modack, which sets the strategy's deadline within a
// few milliseconds, batched with others. It never waits for an RPC. A
// message without an ack id, already settled or already tracked, or any
// message after Close, is ignored.
func (e *Extender) Track(m *message.Message) { e.TrackAll([]*message.Message{m}) }

// TrackAll is Track for a batch (a response's messages): one lock and one
// allocation for the whole batch.
func (e *Extender) TrackAll(ms []*message.Message) {
	now := time.Now()
	slab := make([]lease, len(ms))
	added := 0
	e.mu.Lock()
	for i, m := range ms {
		if m == nil || m.AckID == "" || m.Settled() {
			continue
		}
		k := e.keyOf(m)
		if e.closed || e.leases[k] != nil {
			continue
		}
		received := m.ReceiveTime
		if received.IsZero() || received.After(now) {
			received = now
		}
		l := &slab[i]
		*l = lease{
			m:        m,
			key:      k,
			received: received,
			size:     m.Size(),
			eo:       m.ExactlyOnce,
			state:    stateReceipt,
			expiry:   received.Add(e.cfg.StreamAckDeadline),
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
func (e *Extender) Confirmed(m *message.Message) <-chan struct{} {
	if m == nil || !m.ExactlyOnce {
		return nil
	}
	k := e.keyOf(m)
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.leases[k]
	if l == nil || l.m != m || l.confirmDone {
		return nil
	}
	return l.confirm
}

// Release stops tracking m; it is idempotent and safe for a message that
// was never tracked. With o == message.Ack it records the receipt→now
// latency for the Adaptive strategy.
//
// The settle path should call Release once the outcome has reached the
// server (the Acknowledge or nack RPC returned), not before: until then the
// extender keeps the lease alive, so a slow ack RPC cannot let it lapse.
//
// When the extender itself settles a message (message.Expired: past the
// maximum extension, or a permanent modack failure) the settle path runs on
// the extender's loop or worker goroutine, so it must not block there (an
// Expired outcome sends no RPC: the server redelivers on its own).
func (e *Extender) Release(m *message.Message, o message.Outcome) {
	if m == nil || m.AckID == "" {
		return
	}
	k := e.keyOf(m)
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.leases[k]
	if l == nil || l.m != m {
		return
	}
	e.removeLocked(l)
	if o == message.Ack {
		e.policy.record(now.Sub(l.received))
	}
}

// ReleaseAcked releases the leases of ack ids of subscription ("" for the
// extender's own) whose acks have reached the server, recording their
// latency as Release does for message.Ack. It is the acknowledger's
// completion hook (ack.Config.OnAcked): a settle path that defers lease
// release to it keeps extending a lease while its ack is still on its way.
func (e *Extender) ReleaseAcked(subscription string, ackIDs []string) {
	if subscription == "" {
		subscription = e.sub
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ackIDs {
		k := key{sub: subscription, ackID: id}
		l := e.leases[k]
		if l == nil {
			continue
		}
		e.removeLocked(l)
		e.policy.record(now.Sub(l.received))
	}
}

// Deadline is the deadline the strategy yields now, in whole seconds: what
// the stream should use as its ack deadline and what new leases get.
// Messages of exactly-once subscriptions get at least 60 s.
func (e *Extender) Deadline() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return ceilSeconds(e.policy.deadline())
}

// Len is the number of leases held.
func (e *Extender) Len() int {
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
		d = max(d, ExactlyOnceMinDeadline)
	}
	return min(ceilSeconds(d), MaxDeadline)
}

// margin is the safety margin in effect for deadline d.
func (e *Extender) margin(d time.Duration) time.Duration {
	return min(e.cfg.Margin, d/2)
}

func (e *Extender) emit(ev event.Event) {
	if ev.Subscription == "" {
		ev.Subscription = e.sub
	}
	e.events.Emit(ev)
}

// Leased returns the messages whose leases are held now, in no particular
// order: at shutdown the owner nacks what is still leased.
func (e *Extender) Leased() []*message.Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*message.Message, 0, len(e.leases))
	for _, l := range e.leases {
		out = append(out, l.m)
	}
	return out
}

// removeLocked takes l out of the table.
func (e *Extender) removeLocked(l *lease) {
	delete(e.leases, l.key)
	l.gone = true
	l.endConfirm()
}
