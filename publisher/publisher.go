package publisher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/internal/carrier"
	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Publisher publishes to one topic through a batching worker. Make it with
// Dial, New or NewFromClient and stop it with Close; its methods are safe for
// concurrent use.
type Publisher struct {
	client     pubsubpb.PublisherClient
	topic      string
	cfg        Config
	topicBytes int // encoded topic field of every request
	batchLimit int // most message bytes one batch may hold
	flow       *flowQueue

	// ctx bounds every RPC and backoff; it is cancelled only when a
	// Shutdown deadline passes (abort) or after Close finished.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards the batching: what Publish touches.
	mu        sync.Mutex
	closing   bool
	free      keyState // unordered messages
	keys      map[string]*keyState
	timers    *stage.Ring[*batch] // batches in opening order (deadline order); closed ones are skipped
	openCount int                 // open batches (the rest of timers is stale)
	timerIdle bool                // the timer goroutine waits for timerWake, not for a deadline

	// sendMu guards the hand-off to the senders, so that a sender of
	// unordered batches never waits for (or holds up) Publish. Taken after
	// mu when both are held.
	sendMu  sync.Mutex
	ready   *stage.Ring[*batch] // closed batches waiting for a sender
	live    map[*batch]struct{} // every sealed batch not yet done, for Flush
	senders int

	slabs sync.Pool // of *wireSlab: the wire side of completed full-size batches

	timerWake chan struct{} // a batch opened while the timer goroutine was idle
	stop      chan struct{} // closed by Close to stop the timer goroutine
	wg        sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	stats counters

	tracing *pubTracer // nil unless Config.TracerProvider is set

	conn io.Closer // the connection Dial made, closed by Shutdown; nil from New

	hedges *hedgeBucket // nil unless Config.Hedging.Delay is set
}

type counters struct {
	published, failed, batches, retries atomic.Int64
	calls                               atomic.Int64 // Publish calls, for the index in an invalid message's Error
	hedged, hedgeWins, hedgesRefused    atomic.Int64
}

// Stats is a snapshot of a Publisher's counters.
type Stats struct {
	Published int64 // messages with a server-assigned id
	Failed    int64 // messages that failed after they were queued (paused keys included)
	Batches   int64 // Publish RPCs that succeeded
	Retries   int64 // Publish RPCs retried
	// OutstandingMessages and OutstandingBytes are held by flow control
	// now: published and not yet settled.
	OutstandingMessages int
	OutstandingBytes    int
	// HedgedAttempts counts the extra attempts Config.Hedging sent,
	// HedgeWins the batches an extra attempt settled first, and
	// HedgesRefused the extra attempts the token bucket refused.
	HedgedAttempts int64
	HedgeWins      int64
	HedgesRefused  int64
}

// New returns a Publisher for topic ("projects/{project}/topics/{topic}")
// over conn, for example a *grpc.ClientConn. The caller keeps ownership of
// conn: Close does not close it.
func New(conn grpc.ClientConnInterface, topic string, cfg Config) (*Publisher, error) {
	if conn == nil {
		return nil, fmt.Errorf("publisher: nil connection")
	}
	return NewFromClient(pubsubpb.NewPublisherClient(conn), topic, cfg)
}

// NewFromClient is New over a PublisherClient: a caller's own stub or a
// wrapper around the generated client (to record or fail requests in
// tests, say). It starts one goroutine (the batch timer); Close stops it.
func NewFromClient(client pubsubpb.PublisherClient, topic string, cfg Config) (*Publisher, error) {
	if client == nil {
		return nil, fmt.Errorf("publisher: nil client")
	}
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Publisher{
		client:     client,
		topic:      topic,
		cfg:        cfg,
		topicBytes: fieldBytes(len(topic)),
		flow:       newFlowQueue(cfg.Flow),
		keys:       make(map[string]*keyState),
		ready:      stage.NewRing[*batch](cfg.MaxInFlightBatches),
		timers:     stage.NewRing[*batch](64),
		live:       make(map[*batch]struct{}),
		timerIdle:  true,
		timerWake:  make(chan struct{}, 1),
		stop:       make(chan struct{}),
	}
	if cfg.TracerProvider != nil {
		p.tracing = newPubTracer(cfg.TracerProvider, topic)
	}
	if cfg.Hedging.Delay > 0 {
		p.hedges = newHedgeBucket(cfg.Hedging)
	}
	p.batchLimit = min(cfg.MaxBytes, limits.MaxRequestBytes-p.topicBytes)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.timerLoop()
	return p, nil
}

// checkTopic applies the service's name rules, so a bad name fails here
// and not as INVALID_ARGUMENT on every batch.
func checkTopic(topic string) error {
	if err := limits.CheckName(limits.Topics, topic); err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	return nil
}

// Publish adds m to the open batch of its ordering key and returns its
// Result at once, unless flow control is at its limit: then it blocks
// until there is room or ctx is done (Config.Flow.FailFast: it fails at
// once). ctx bounds only that wait; once accepted the message is published
// whatever becomes of ctx. Errors known at once (ErrClosed, ErrPaused,
// ErrInvalidMessage, ErrFlowControlled) are in the returned Result.
//
// An invalid message (see ErrInvalidMessage) fails at once, before it is
// queued: it is never retried and never fails another message.
func (p *Publisher) Publish(ctx context.Context, m *Message) *Result {
	if p.tracing != nil {
		return p.publishTraced(ctx, m)
	}
	return p.add(ctx, m, nil, trace.SpanContext{})
}

// add is Publish; tm holds the message's spans when they are recorded
// (else nil), and sc, when valid, is the trace context the message
// carries (see carrier.AppendWire).
//
// An untraced message takes p.mu once: the closed and paused checks, the
// flow-control permit when one is free and no Publish waits for one, and
// the batching. Only a message that must wait for flow control (or is
// traced: its spans start around the wait) takes the slow path.
func (p *Publisher) add(ctx context.Context, m *Message, tm *tracedMsg, sc trace.SpanContext) *Result {
	sz, err := p.measure(m, sc)
	if err != nil {
		return failed(err)
	}
	if tm == nil {
		if r, ok := p.admit(m, sz, nil, sc, false); ok {
			return r
		}
	} else if m.OrderingKey != "" {
		// Fail fast on a paused key before waiting for flow control
		// (which itself refuses a closed publisher); both are checked
		// again once the permit is held.
		p.mu.Lock()
		_, err := p.admitLocked(m.OrderingKey)
		p.mu.Unlock()
		if err != nil {
			return failed(err)
		}
	}
	if tm != nil {
		tm.flowControl(ctx)
	}
	err = p.flow.acquire(ctx, sz.flow)
	if tm != nil {
		tm.admitted(ctx, err)
	}
	if err != nil {
		return failed(err)
	}
	r, _ := p.admit(m, sz, tm, sc, true)
	return r
}

// msgSize is what a message counts for: flow control (flow: its encoded
// size with the trace context it carries), a request (req: that size
// framed as a field) and its trace context alone (wire).
type msgSize struct{ flow, req, wire int }

// measure refuses m before it is queued when it is nil, has an ordering
// key without Config.EnableOrdering, or breaks a limit of the service,
// so that it never fails the other messages of a batch; else it returns
// m's sizes.
func (p *Publisher) measure(m *Message, sc trace.SpanContext) (msgSize, error) {
	index := p.stats.calls.Add(1) - 1
	if m == nil {
		return msgSize{}, invalid("", "message #%d: nil", index)
	}
	if m.OrderingKey != "" && !p.cfg.EnableOrdering {
		return msgSize{}, invalid(m.OrderingKey, "message #%d: OrderingKey set but Config.EnableOrdering is false", index)
	}
	if v := limits.CheckMessage(m.Data, m.Attributes, m.OrderingKey); v != nil {
		return msgSize{}, invalid(m.OrderingKey, "message #%d: %v", index, v)
	}
	// The trace context's googclient_ entries follow the caller's
	// attributes on the wire and so win over the caller's own googclient_
	// keys, which the service allows (see carrier.AppendWire).
	sz := msgSize{wire: carrier.WireSize(sc)}
	sz.flow = m.encodedSize() + sz.wire
	sz.req = fieldBytes(sz.flow)
	if n := p.topicBytes + sz.req; n > limits.MaxRequestBytes {
		return msgSize{}, invalid(m.OrderingKey, "message #%d: message: request size: %d bytes encoded in a request, the limit is %d",
			index, n, limits.MaxRequestBytes)
	}
	return sz, nil
}

// admit batches m under one hold of p.mu unless the Publisher is closed
// or m's key paused. With held, m already holds its flow-control permit,
// which a refusal gives back; without, admit takes one if it is free now
// and reports ok false, having done nothing, when m must wait for it.
// The fast path and the end of the slow one are thus the same code.
func (p *Publisher) admit(m *Message, sz msgSize, tm *tracedMsg, sc trace.SpanContext, held bool) (r *Result, ok bool) {
	p.mu.Lock()
	ks, err := p.admitLocked(m.OrderingKey)
	if err != nil {
		p.mu.Unlock()
		if held {
			p.flow.release(1, sz.flow)
		}
		return failed(err), true
	}
	if !held && !p.flow.tryAcquire(sz.flow) {
		p.mu.Unlock()
		return nil, false
	}
	r = p.addLocked(p.keyStateLocked(m.OrderingKey, ks), m, sz, tm, sc)
	p.mu.Unlock()
	return r, true
}

// admitLocked returns the error that refuses a message for key now
// (closed, or the key paused), or the key's batching state if it has one
// (nil: none yet; the unordered messages' for key "").
func (p *Publisher) admitLocked(key string) (*keyState, error) {
	if p.closing {
		return nil, ErrClosed
	}
	if key == "" {
		return &p.free, nil
	}
	ks := p.keys[key]
	if ks != nil && ks.paused != nil {
		return nil, ks.paused
	}
	return ks, nil
}

// keyStateLocked returns ks, or the new batching state of key when ks is
// nil (admitLocked found none).
func (p *Publisher) keyStateLocked(key string, ks *keyState) *keyState {
	if ks == nil {
		ks = &keyState{key: key}
		p.keys[key] = ks
	}
	return ks
}

// addLocked appends a message to the open batch of ks, closing batches on
// the count and byte thresholds.
func (p *Publisher) addLocked(ks *keyState, m *Message, sz msgSize, tm *tracedMsg, sc trace.SpanContext) *Result {
	b := ks.open
	if b != nil && b.bytes+sz.req > p.batchLimit {
		p.sealLocked(b) // m would take it over the limit: m opens the next one
		b = nil
	}
	if b == nil {
		b = p.openLocked(ks)
	}
	pm, r := b.slot(p.cfg.MaxMessages, &p.slabs)
	m.fill(pm)
	if sz.wire > 0 {
		b.carry(pm, sc, sz.wire)
	}
	r.o, r.i = &b.outcome, len(b.msgs)
	if tm != nil {
		tm.i = len(b.msgs)
		b.spans = append(b.spans, tm)
	}
	b.msgs = append(b.msgs, pm)
	b.n++
	b.bytes += sz.req
	b.flowBytes += sz.flow
	if len(b.msgs) >= p.cfg.MaxMessages || b.bytes >= p.batchLimit {
		p.sealLocked(b)
	}
	return r
}

func (p *Publisher) openLocked(ks *keyState) *batch {
	b := &batch{ks: ks, ordered: ks.ordered(), open: true, deadline: time.Now().Add(p.cfg.Delay), outcome: outcome{done: make(chan struct{})}}
	ks.open = b
	p.openCount++
	p.timers.Push(b)
	p.compactTimersLocked()
	// Every batch waits the same Delay, so a timer already armed fires
	// no later than b's deadline: only an idle timer goroutine is woken.
	if p.timerIdle {
		p.timerIdle = false
		select {
		case p.timerWake <- struct{}{}:
		default:
		}
	}
	return b
}

// sealLocked closes b to new messages and queues it for sending: at once
// for unordered messages, behind the key's batch in flight otherwise.
func (p *Publisher) sealLocked(b *batch) {
	ks := b.ks
	ks.lastN = b.n
	p.closeLocked(b)
	// Drop closed batches from the front of the timer list now, so a long
	// Delay does not keep them listed after they were sent.
	for p.timers.Len() > 0 && !p.timers.Front().open {
		p.timers.Pop()
	}
	p.sendMu.Lock()
	p.live[b] = struct{}{}
	queued := ks.ordered() && ks.busy
	if !queued {
		ks.busy = ks.ordered()
		p.ready.Push(b)
		p.dispatchSendLocked()
	}
	p.sendMu.Unlock()
	if queued {
		ks.queue = append(ks.queue, b)
	}
}

// closeLocked marks b closed to new messages.
func (p *Publisher) closeLocked(b *batch) {
	b.open = false
	b.ks.open = nil
	p.openCount--
}

// compactTimersLocked drops closed batches from the timer list when they
// outnumber the open ones: closed batches behind a long-open one (a quiet
// ordering key under a long Delay) would otherwise pile up there. The cost
// is amortized O(1) per batch.
func (p *Publisher) compactTimersLocked() {
	if p.timers.Len() <= 2*p.openCount+1024 {
		return
	}
	for range p.timers.Len() {
		if b := p.timers.Pop(); b.open {
			p.timers.Push(b)
		}
	}
}

// dispatchSendLocked starts a sender when batches wait and fewer than
// MaxInFlightBatches senders run. Senders exit when nothing waits, so an
// idle Publisher holds only its timer goroutine. The caller holds sendMu.
func (p *Publisher) dispatchSendLocked() {
	if p.ready.Len() > 0 && p.senders < p.cfg.MaxInFlightBatches {
		p.senders++
		p.wg.Add(1)
		go p.sendLoop()
	}
}

// ResumePublish lets key be published again after a failure paused it. It
// does nothing for a key that is not paused.
func (p *Publisher) ResumePublish(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.keys[key]
	if ks == nil || ks.paused == nil {
		return
	}
	ks.paused = nil
	if ks.idle() {
		delete(p.keys, key)
	}
}

// Flush sends every open batch now and waits until every message published
// before the call has settled, or ctx is done. Publish errors are reported
// by the messages' Results, not by Flush.
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	if b := p.free.open; b != nil {
		p.sealLocked(b)
	}
	for _, ks := range p.keys {
		if ks.open != nil {
			p.sealLocked(ks.open)
		}
	}
	p.sendMu.Lock()
	waits := make([]<-chan struct{}, 0, len(p.live))
	for b := range p.live {
		waits = append(waits, b.done)
	}
	p.sendMu.Unlock()
	p.mu.Unlock()
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return fmt.Errorf("publisher: flush: %w", ctx.Err())
		}
	}
	return nil
}

// Close is Shutdown without a deadline: it refuses new messages, flushes
// everything (each batch within its RetryDeadline), and stops every
// goroutine the Publisher started. Later calls return the first one's
// result. It closes the connection only when Dial made it.
func (p *Publisher) Close() error { return p.Shutdown(context.Background()) }

// Shutdown refuses new messages (they fail with ErrClosed, as do Publish
// calls blocked on flow control), flushes everything, stops every
// goroutine the Publisher started and closes the connection Dial made. If ctx is done first, RPCs in flight
// and retries are abandoned, the messages not yet published fail, and
// Shutdown returns ctx's error once every goroutine has exited.
func (p *Publisher) Shutdown(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closing = true
		p.mu.Unlock()
		p.flow.close()
		err := p.Flush(ctx)
		if err != nil {
			p.cancel() // abandon RPCs and backoffs: every batch ends quickly
			_ = p.Flush(context.Background())
		}
		close(p.stop)
		p.wg.Wait()
		p.cancel()
		if p.conn != nil {
			err = errors.Join(err, p.conn.Close())
		}
		p.closeErr = err
	})
	return p.closeErr
}

// Stats returns a snapshot of the counters.
func (p *Publisher) Stats() Stats {
	msgs, bytes := p.flow.outstanding()
	return Stats{
		Published:           p.stats.published.Load(),
		Failed:              p.stats.failed.Load(),
		Batches:             p.stats.batches.Load(),
		Retries:             p.stats.retries.Load(),
		OutstandingMessages: msgs,
		OutstandingBytes:    bytes,
		HedgedAttempts:      p.stats.hedged.Load(),
		HedgeWins:           p.stats.hedgeWins.Load(),
		HedgesRefused:       p.stats.hedgesRefused.Load(),
	}
}
