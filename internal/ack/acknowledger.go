// Package ack is a source's acknowledger: the one place that sends its
// acks and nacks, and a lease extender's modacks, to Pub/Sub.
//
// Ack ids are batched per kind (Acknowledge; ModifyAckDeadline per
// deadline) and sent by unary RPC, never on the stream, so a slow RPC
// cannot block receiving. An ack id goes out at once when no request of
// its kind is in flight; while one is, later ids gather behind it and
// leave when it completes (send now, else coalesce): at low load an ack
// reaches the server one round trip after it was made, and under load
// each request carries what arrived during the previous one's round trip,
// with no flush timer. A batch that fills a request (internal/ackids: 1,000
// ids or 512 KiB) goes at once; Flush and Close send everything.
//
// Transient failures are retried with backoff within a retry deadline;
// ack ids that fail for good are reported as an event.AckFailed and their
// Tag hears the *IDError. On exactly-once subscriptions the server reports
// failures per ack id in an errdetails.ErrorInfo whose metadata maps ack id
// → reason: TRANSIENT_ reasons are retried, others fail that ack id for
// good, and ack ids it does not list succeeded (as the service and
// pubsubtest behave; Google's Go client fails them with the RPC's status).
package ack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

// DefaultMaxInFlight is a zero Config.MaxInFlight's bound.
const DefaultMaxInFlight = 8

// DefaultGap is the least time between the starts of two requests of a
// kind that are not full: under load each then carries at least a
// millisecond's worth of acks, however short the round trip.
const DefaultGap = time.Millisecond

const (
	maxMaxInFlight       = 1024
	maxModackSeconds     = 600 // the API's largest ack deadline
	defaultRetryDeadline = 60 * time.Second
	eoRetryDeadline      = 600 * time.Second // the server must confirm it, and a caller waits
	defaultRPCTimeout    = 60 * time.Second
)

// Config configures an Acknowledger. The zero value means the defaults.
type Config struct {
	// MaxInFlight bounds concurrent RPCs per kind: Acknowledge, and
	// ModifyAckDeadline (0: DefaultMaxInFlight; at most 1024).
	MaxInFlight int
	// RetryDeadline bounds how long an ack id is retried after its first
	// attempt (0: 60 s, or 600 s for exactly-once ack ids).
	RetryDeadline time.Duration
	// RPCTimeout bounds one attempt (0: 60 s).
	RPCTimeout time.Duration
	// Confirmed, if set, is told all the tags of a request the server
	// accepted whole, instead of AckDone(nil) on each, so that their
	// owner reads the clock once per batch. It must tell every tag it is
	// given (entries may be nil).
	Confirmed func(tags []Tag, now time.Time)
	Tracer    Tracer       // traces every RPC attempt, if set
	Events    event.Func   // Ack, Nack (as the server accepted), Retry, AckFailed
	Logger    *slog.Logger // failures at Warn, retries at Debug (nil: slog.Default())
}

// Tracer traces the acknowledger's RPCs (the subscriber's OpenTelemetry
// tracing implements it).
type Tracer interface {
	// StartRPC is called before each attempt of an RPC ("ack", "nack" or
	// "modack", setting the deadline to seconds); the function it returns
	// is called once with the attempt's outcome. ackIDs and tags must not
	// be kept or modified.
	StartRPC(op string, seconds int32, ackIDs []string, tags []Tag) func(Attempt)
}

// Attempt is the outcome of one RPC attempt, by index into its ack ids.
// The ids in neither Failed nor Retry were confirmed by the server.
type Attempt struct {
	Err    error // the RPC's error (nil: every ack id was confirmed)
	Failed []int // failed for good (deadline passed, refused, or closing)
	Retry  []int // to be sent again after a backoff
}

// Acknowledger batches acks, nacks and modacks of one subscription and
// sends them by unary RPC; it is safe for concurrent use. Its goroutines
// are one per RPC in flight (at most 2 × MaxInFlight) and the timer's
// while it fires; Close returns once they have exited.
type Acknowledger struct {
	client pubsubpb.SubscriberClient
	sub    string
	cfg    Config

	ctx    context.Context // cancelled when Close gives up: aborts RPCs
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	batches  map[batchKey]*batch
	order    []*batch // batches in creation order, for dispatch
	last     *batch   // the batch used last (nearly always the next one's too)
	retries  []*request
	timer    *time.Timer // armed while retries or gap-held ids wait
	timerAt  time.Time
	lastSent [numKinds]time.Time // start of the last request per kind
	inflight [numKinds]int
	// eoInflight: a caller waits on exactly-once confirmations, so such
	// ids coalesce only behind a request of their own.
	eoInflight [numKinds]int
	pending    int           // ack ids in batches
	closed     bool          // no more ack ids accepted
	aborted    bool          // nothing more is sent
	idle       chan struct{} // closed once nothing is pending, in flight or retrying
}

// New returns an Acknowledger for subscription (its full name) that sends
// through client. It starts no goroutine until there is something to send.
func New(client pubsubpb.SubscriberClient, subscription string, cfg Config) (*Acknowledger, error) {
	switch {
	case client == nil:
		return nil, errors.New("ack: nil SubscriberClient")
	case subscription == "":
		return nil, errors.New("ack: empty subscription name")
	case cfg.MaxInFlight < 0 || cfg.MaxInFlight > maxMaxInFlight:
		return nil, fmt.Errorf("ack: MaxInFlight %d must be within 0 (default %d) and %d", cfg.MaxInFlight, DefaultMaxInFlight, maxMaxInFlight)
	case cfg.RetryDeadline < 0:
		return nil, fmt.Errorf("ack: RetryDeadline %v must not be negative", cfg.RetryDeadline)
	case cfg.RPCTimeout < 0:
		return nil, fmt.Errorf("ack: RPCTimeout %v must not be negative", cfg.RPCTimeout)
	}
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)
	cfg.RPCTimeout = cmp.Or(cfg.RPCTimeout, defaultRPCTimeout)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	return &Acknowledger{client: client, sub: subscription, cfg: cfg, ctx: ctx, cancel: cancel, batches: map[batchKey]*batch{}}, nil
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

// AckTag queues an ack (exactly-once if eo) whose fate t hears.
func (a *Acknowledger) AckTag(ackID string, eo bool, t Tag) {
	a.enqueue(batchKey{kind: kindAck, eo: eo}, ackID, t)
}

// NackTag queues a nack after delay (exactly-once if eo) whose fate t
// hears.
func (a *Acknowledger) NackTag(ackID string, delay time.Duration, eo bool, t Tag) {
	a.enqueue(batchKey{kind: kindModack, seconds: DelaySeconds(delay), nack: true, eo: eo}, ackID, t)
}

// ModackTags queues one deadline modification (clamped to 0–600 s) for
// many ack ids, each of whose fate tags[i] hears (tags nil: nobody
// listens); eo treats them as exactly-once. A lease extender sends its
// modacks with it. It takes the slices over: the caller must not use them
// again (an empty batch adopts them instead of copying them).
func (a *Acknowledger) ModackTags(ackIDs []string, seconds int32, eo bool, tags []Tag) {
	if len(ackIDs) == 0 {
		return
	}
	if tags == nil {
		tags = make([]Tag, len(ackIDs))
	}
	a.mu.Lock()
	b := a.openLocked(batchKey{kind: kindModack, seconds: min(max(seconds, 0), maxModackSeconds), eo: eo})
	if b == nil {
		a.mu.Unlock()
		a.fail(&request{ids: ackIDs, tags: tags}, nil, nil, ErrClosed, nil)
		return
	}
	b.addAll(ackIDs, tags)
	a.queuedLocked(b, len(ackIDs))
	a.mu.Unlock()
}

// DelaySeconds converts a nack delay to the API's whole seconds: rounded
// up (a positive delay never becomes an immediate nack), at most 600.
func DelaySeconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32(min((d+time.Second-1)/time.Second, maxModackSeconds))
}

// enqueue is the hot path: an append under the lock, and a dispatch only
// when a batch is full or its kind may go now.
func (a *Acknowledger) enqueue(key batchKey, ackID string, t Tag) {
	a.mu.Lock()
	b := a.openLocked(key)
	if b == nil {
		a.mu.Unlock()
		a.fail(&request{ids: []string{ackID}, tags: []Tag{t}}, nil, nil, ErrClosed, nil)
		return
	}
	b.add(ackID, t)
	a.queuedLocked(b, 1)
	a.mu.Unlock()
}

// openLocked returns key's batch, or nil once Close has begun.
func (a *Acknowledger) openLocked(key batchKey) *batch {
	if a.closed {
		return nil
	}
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

func (a *Acknowledger) queuedLocked(b *batch, n int) {
	a.pending += n
	if b.full() || a.sendNowLocked(b.key) {
		a.dispatchLocked()
	}
}

// sendNowLocked reports whether ack ids of key go out at once: no request
// of their kind is in flight (for exactly-once ids, none of theirs), and
// DefaultGap has passed since the last one started.
func (a *Acknowledger) sendNowLocked(key batchKey) bool {
	if a.inflight[key.kind] > 0 && (!key.eo || a.eoInflight[key.kind] > 0) {
		return false
	}
	next := a.lastSent[key.kind].Add(DefaultGap)
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
	return wait(ctx, idle)
}

// Close stops accepting ack ids, sends everything pending, waits for the
// RPCs and their retries, and stops. When ctx ends first, it aborts the
// RPCs in flight, fails every unconfirmed ack id with ErrClosed and
// returns ctx's error. Either way no goroutine of the acknowledger is left
// when it returns. Ack ids given after Close fail with ErrClosed.
func (a *Acknowledger) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	a.flushAllLocked()
	// Best-effort nacks waiting out a backoff fail now: the server
	// redelivers their messages at their deadlines anyway.
	var gaveUp []*request
	a.retries = slices.DeleteFunc(a.retries, func(r *request) bool {
		if r.key.bestEffort() {
			gaveUp = append(gaveUp, r)
		}
		return r.key.bestEffort()
	})
	idle := a.idleLocked()
	a.mu.Unlock()
	for _, r := range gaveUp {
		a.fail(r, nil, nil, ErrClosed, r.err)
	}
	err := wait(ctx, idle)
	a.mu.Lock()
	a.aborted = true // nothing is dispatched from here on
	dropped := a.retries
	for _, b := range a.order {
		if len(b.ids) > 0 {
			dropped = append(dropped, &request{key: b.key, ids: b.ids, tags: b.tags})
			b.reset(0)
		}
	}
	a.retries, a.pending = nil, 0
	a.stopTimerLocked()
	a.noteIdleLocked()
	a.mu.Unlock()
	a.cancel() // RPCs still in flight fail now and are settled by complete
	for _, r := range dropped {
		a.fail(r, nil, nil, ErrClosed, r.err)
	}
	a.wg.Wait()
	return err
}

func wait(ctx context.Context, idle <-chan struct{}) error {
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Acknowledger) flushAllLocked() {
	for _, b := range a.order {
		b.flush = len(b.ids) > 0
	}
	a.dispatchLocked()
}

// idleLocked returns a channel closed once nothing is pending, in flight
// or waiting to be retried.
func (a *Acknowledger) idleLocked() <-chan struct{} {
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	idle := a.idle
	a.noteIdleLocked()
	return idle
}

func (a *Acknowledger) noteIdleLocked() {
	if a.idle != nil && a.pending == 0 && len(a.retries) == 0 && a.inflight == [numKinds]int{} {
		close(a.idle)
		a.idle = nil
	}
}

// armRetryLocked arms the timer for the earliest retry whose kind has a
// free slot: one waiting for a slot goes when a request of its kind
// completes, and arming for it would fire again and again meanwhile.
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
// whatever is due and re-arms for what is left.
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

func (a *Acknowledger) stopTimerLocked() {
	if a.timer != nil && a.timer.Stop() {
		a.wg.Done()
	}
	a.timer = nil
}
