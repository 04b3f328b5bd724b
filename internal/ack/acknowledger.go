package ack

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
)

// MaxModackSeconds is the API's largest ack deadline; Modack and Nack clamp
// to 0–MaxModackSeconds.
const MaxModackSeconds = 600

// Acknowledger batches acks, nacks and modacks of one subscription and
// sends them by unary RPC. Its methods are safe for concurrent use. Make it
// with New and stop it with Close, which flushes and returns only after
// every goroutine it started has exited.
//
// Goroutines: one per RPC in flight (at most 2 × MaxInFlight), and the
// retry timer's while it fires; none per ack id, none while idle.
type Acknowledger struct {
	client pubsubpb.SubscriberClient
	sub    string
	cfg    Config
	log    *slog.Logger
	events event.Func

	ctx    context.Context // cancelled when Close gives up: aborts RPCs
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	batches  map[batchKey]*batch
	order    []*batch // batches in creation order, for dispatch
	last     *batch   // the batch used last (nearly always the next one's too)
	retries  []*request
	timer    *time.Timer // armed while retries or gap-held ids wait: dispatches them
	timerAt  time.Time
	lastSent [numKinds]time.Time // start of the last request per kind
	inflight [numKinds]int
	// eoInflight counts the exactly-once requests in flight per kind: a
	// caller waits on their confirmations, so such ids go out at once
	// while none is in flight and coalesce only behind the one that is.
	eoInflight [numKinds]int
	pending    int   // ack ids in batches
	reporting  int   // completed attempts whose outcome is being reported
	unacked    int64 // acks and immediate nacks not yet confirmed or failed
	closed     bool  // no more ack ids accepted
	aborted    bool  // nothing more is sent
	idle       chan struct{}
}

// New returns an Acknowledger for subscription (its full name) that sends
// through client. It starts no goroutine until there is something to send.
func New(client pubsubpb.SubscriberClient, subscription string, cfg Config) (*Acknowledger, error) {
	if client == nil {
		return nil, errors.New("ack: nil SubscriberClient")
	}
	if subscription == "" {
		return nil, errors.New("ack: empty subscription name")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	a := &Acknowledger{
		client:  client,
		sub:     subscription,
		cfg:     cfg,
		log:     cfg.Logger,
		events:  cfg.Events,
		ctx:     ctx,
		cancel:  cancel,
		batches: make(map[batchKey]*batch),
	}
	return a, nil
}

// Closed reports whether Close has been called.
func (a *Acknowledger) Closed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Client is the client the acknowledger sends through: its source's
// connection, which a lease extender sends that source's modacks on too.
func (a *Acknowledger) Client() pubsubpb.SubscriberClient { return a.client }

// ModackTags queues one deadline modification for many ack ids, each of
// whose fate tags[i] hears (tags nil: nobody listens); eo treats them as
// exactly-once (failures per ack id, sent at once when no such request is
// in flight). A lease extender sends its modacks with it. It takes the
// slices over: the caller must not use them again (a batch that is empty
// adopts them instead of copying them).
func (a *Acknowledger) ModackTags(ackIDs []string, seconds int32, eo bool, tags []Tag) {
	if len(ackIDs) == 0 {
		return
	}
	key := batchKey{kind: kindModack, seconds: clampSeconds(seconds), eo: eo}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		err := &IDError{AckID: ackIDs[0], Kind: ErrClosed}
		for _, t := range tags {
			t.AckDone(err)
		}
		a.emitFailed(len(ackIDs), err)
		return
	}
	b := a.batchLocked(key)
	if len(b.ids) == 0 && tags != nil {
		b.adopt(ackIDs, tags)
	} else {
		b.grow(len(ackIDs))
		for i, id := range ackIDs {
			var t Tag
			if tags != nil {
				t = tags[i]
			}
			b.add(id, t)
		}
	}
	a.pending += len(ackIDs)
	if key.counts() {
		a.unacked += int64(len(ackIDs))
	}
	if b.full() || a.sendNowLocked(key) {
		a.dispatchLocked()
	}
	a.mu.Unlock()
}

// DelaySeconds converts a nack delay to the API's whole seconds: rounded
// up (a positive delay never becomes an immediate nack), at most 600.
func DelaySeconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	s := (d + time.Second - 1) / time.Second
	if s > MaxModackSeconds {
		return MaxModackSeconds
	}
	return int32(s)
}

func clampSeconds(s int32) int32 { return min(max(s, 0), MaxModackSeconds) }

// AckTag queues an ack (exactly-once if eo) whose fate t hears.
func (a *Acknowledger) AckTag(ackID string, eo bool, t Tag) {
	a.enqueueTag(batchKey{kind: kindAck, eo: eo}, ackID, t)
}

// NackTag queues a nack after delay (exactly-once if eo) whose fate t
// hears.
func (a *Acknowledger) NackTag(ackID string, delay time.Duration, eo bool, t Tag) {
	a.enqueueTag(batchKey{kind: kindModack, seconds: DelaySeconds(delay), nack: true, eo: eo}, ackID, t)
}

// enqueueTag is the hot path: an append under the lock; a dispatch only
// when a batch is full or its kind may go now (sendNowLocked).
func (a *Acknowledger) enqueueTag(key batchKey, ackID string, t Tag) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		err := &IDError{AckID: ackID, Kind: ErrClosed}
		if t != nil {
			t.AckDone(err)
		}
		a.emitFailed(1, err)
		return
	}
	b := a.batchLocked(key)
	b.add(ackID, t)
	a.pending++
	counts := key.counts()
	if counts {
		a.unacked++
	}
	if b.full() || a.sendNowLocked(key) {
		a.dispatchLocked()
	}
	a.mu.Unlock()
}

// sendNowLocked reports whether ack ids of key go out at once: no request
// of their kind is in flight (for exactly-once ids, none of theirs, as a
// caller waits on their confirmation). While one is, later ids gather into
// the next request, which leaves when it completes — send now, else
// coalesce. At low load an ack reaches the server one round trip after
// it is queued; under load each request carries what arrived during the previous
// one's round trip, so the requests per ack stay few. Nothing waits for a
// timer.
//
// Requests of a kind also start at least Gap apart (unless full): at low
// load that costs nothing (the last request is long gone), and under load
// it makes each request carry at least Gap's worth of acks, however short
// the round trip.
func (a *Acknowledger) sendNowLocked(key batchKey) bool {
	idle := a.inflight[key.kind] == 0 || key.eo && a.eoInflight[key.kind] == 0
	if !idle {
		return false
	}
	next := a.lastSent[key.kind].Add(a.cfg.Gap)
	if a.timer != nil && !a.timerAt.After(next) {
		// The timer dispatches no later than the gap allows: no need to
		// read the clock for every id that arrives meanwhile.
		return false
	}
	if time.Now().Before(next) {
		a.armLocked(next)
		return false
	}
	return true
}

func (a *Acknowledger) batchLocked(key batchKey) *batch {
	if b := a.last; b != nil && b.key == key {
		return b
	}
	b := a.batches[key]
	if b == nil {
		b = &batch{key: key}
		a.batches[key] = b
		a.order = append(a.order, b)
	}
	a.last = b
	return b
}

// Flush sends everything pending now, and waits until nothing is pending,
// in flight or waiting to be retried, or until ctx is done (under a steady
// stream of new acks that may take a while; stop producing first).
func (a *Acknowledger) Flush(ctx context.Context) error {
	a.mu.Lock()
	if a.aborted {
		a.mu.Unlock()
		return ErrClosed
	}
	a.flushAllLocked()
	idle := a.idleLocked()
	a.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting ack ids, sends everything pending, waits for the
// RPCs and their retries, and stops. When ctx ends first, it aborts the
// RPCs in flight, settles every unconfirmed Result with ErrClosed, reports
// the dropped ack ids as an AckFailed event and returns ctx's error. Either
// way no goroutine of the acknowledger is left when it returns. Ack ids
// given after Close fail with ErrClosed.
func (a *Acknowledger) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	if !a.aborted {
		a.flushAllLocked()
	}
	// Best-effort nacks waiting out a backoff are not waited for (see
	// bestEffortAfterClose): they fail now.
	var gaveUp []*request
	kept := a.retries[:0]
	for _, r := range a.retries {
		if r.key.nack && !r.key.eo {
			gaveUp = append(gaveUp, r)
			continue
		}
		kept = append(kept, r)
	}
	clear(a.retries[len(kept):])
	a.retries = kept
	for _, r := range gaveUp {
		if r.key.counts() {
			a.unacked -= int64(len(r.ids))
		}
	}
	idle := a.idleLocked()
	a.mu.Unlock()
	for _, r := range gaveUp {
		a.failAll(r, ErrClosed, r.err)
	}

	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = ctx.Err()
	}

	a.mu.Lock()
	a.aborted = true // nothing is dispatched from here on
	var dropped []*request
	for _, b := range a.order {
		if len(b.ids) > 0 {
			dropped = append(dropped, &request{key: b.key, ids: b.ids, tags: b.tags})
			b.reset(0)
		}
	}
	dropped = append(dropped, a.retries...)
	a.retries = nil
	a.pending = 0
	a.stopTimerLocked()
	a.noteIdleLocked()
	a.mu.Unlock()

	a.cancel() // RPCs still in flight fail now and are settled by complete
	for _, r := range dropped {
		a.failAll(r, ErrClosed, r.err)
	}
	a.wg.Wait()
	return err
}

// Stats is a snapshot of an Acknowledger's queues.
type Stats struct {
	Pending  int   // ack ids waiting to be sent
	InFlight int   // RPCs in flight
	Retrying int   // requests waiting for their retry backoff
	Unacked  int64 // acks and immediate nacks not yet confirmed or failed
}

// Stats returns the current queue sizes.
func (a *Acknowledger) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := Stats{Pending: a.pending, Retrying: len(a.retries), Unacked: a.unacked}
	for _, n := range a.inflight {
		st.InFlight += n
	}
	return st
}

func (a *Acknowledger) flushAllLocked() {
	for _, b := range a.order {
		if len(b.ids) > 0 {
			b.flush = true
		}
	}
	a.dispatchLocked()
}

// idleLocked returns a channel closed once nothing is pending, in flight
// or waiting to be retried.
func (a *Acknowledger) idleLocked() <-chan struct{} {
	if a.isIdleLocked() {
		return closedChan
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	return a.idle
}

func (a *Acknowledger) isIdleLocked() bool {
	if a.pending > 0 || len(a.retries) > 0 || a.reporting > 0 {
		return false
	}
	for _, n := range a.inflight {
		if n > 0 {
			return false
		}
	}
	return true
}

func (a *Acknowledger) noteIdleLocked() {
	if a.idle != nil && a.isIdleLocked() {
		close(a.idle)
		a.idle = nil
	}
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// armRetryLocked arms the timer for the earliest retry.
//
// Only retries whose kind has a free slot count: one waiting for a slot
// goes when a request of its kind completes (complete dispatches), and
// arming for it would fire at once, again and again, while the slot is
// busy.
func (a *Acknowledger) armRetryLocked() {
	var due time.Time
	for _, r := range a.retries {
		if a.inflight[r.key.kind] < a.cfg.MaxInFlight && (due.IsZero() || r.due.Before(due)) {
			due = r.due
		}
	}
	if !due.IsZero() {
		a.armLocked(due)
	}
}

// armLocked makes the timer fire no later than at: it then dispatches
// whatever is due (and re-arms for what is left). One timer serves the
// retries and the ids held back by the gap.
func (a *Acknowledger) armLocked(at time.Time) {
	if a.aborted || a.timer != nil && !at.Before(a.timerAt) {
		return
	}
	a.stopTimerLocked()
	a.wg.Add(1)
	a.timerAt = at
	a.timer = time.AfterFunc(max(time.Until(at), 0), func() {
		defer a.wg.Done()
		a.mu.Lock()
		a.timer = nil
		a.dispatchLocked()
		a.armRetryLocked()
		a.mu.Unlock()
	})
}

// stopTimerLocked disarms the timer.
func (a *Acknowledger) stopTimerLocked() {
	if a.timer != nil && a.timer.Stop() {
		a.wg.Done()
	}
	a.timer = nil
}

func (a *Acknowledger) emitFailed(n int, err error) {
	a.events.Emit(event.Event{Kind: event.AckFailed, Subscription: a.sub, Count: n, Err: err})
	a.log.Warn("pubsubflow: ack ids failed", "subscription", a.sub, "count", n, "err", err)
}

// budget is the encoded bytes of ack ids one request may carry: what
// internal/ackids.Split allows (it keeps 1 KiB for the other fields).
const budget = ackids.MaxBytes - 1024
