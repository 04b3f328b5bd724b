package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/tracing"
)

// senderLocked is the acknowledger that sends the modacks of k's
// messages on their source's client, so each is extended on the server it
// came from (built by hand: on the Extender's); nil after Close or once
// the source is closed (its messages are settled).
func (e *Extender) senderLocked(k senderKey) *ack.Acknowledger {
	if e.closed || k.src != nil && k.src.Closed() {
		return nil
	}
	if sd := e.senders[k]; sd != nil {
		return sd.a
	}
	client := e.client
	if k.src != nil {
		client = k.src.Client()
	}
	sd := &sender{e: e, sub: k.sub}
	cfg := ack.Config{
		MaxInFlight:   maxInFlight,
		RetryDeadline: retryDeadline,
		RPCTimeout:    attemptTimeout,
		Confirmed:     sd.accepted,
		Events:        sd.event,
		Logger:        e.cfg.Logger,
	}
	if tp := e.cfg.TracerProvider; tp != nil {
		cfg.Tracer = &modackTracer{e: e, names: tracing.For(tp, k.sub)}
	}
	a, err := ack.New(client, k.sub, cfg)
	if err != nil { // a valid config, a client and a subscription: cannot happen
		panic(fmt.Sprintf("flow: acknowledger for %s: %v", k.sub, err))
	}
	sd.a = a
	e.senders[k] = sd
	return a
}

// closeSenders closes and forgets the senders for which gone is true,
// giving what they have queued or in flight up to timeout. Each tick
// drops those of closed sources (their messages are settled), so an
// Extender that outlives many sources keeps only the live ones'.
func (e *Extender) closeSenders(gone func(senderKey) bool, timeout time.Duration) {
	var closing []*sender
	e.mu.Lock()
	for k, sd := range e.senders {
		if gone(k) {
			closing = append(closing, sd)
			delete(e.senders, k)
		}
	}
	e.mu.Unlock()
	if len(closing) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, sd := range closing {
		_ = sd.a.Close(ctx) // what could not be sent is of no use any more
	}
}

// failingRequests is how many modack requests in a row must fail for
// good before the Extender stops: a refusal or two is the server's word
// on those ack ids, not on the source.
const failingRequests = 5

// sender is one source's sender of modacks.
type sender struct {
	e   *Extender
	a   *ack.Acknowledger
	sub string

	mu      sync.Mutex
	failing int       // requests failed for good since the last accepted
	since   time.Time // when the first of them failed
}

// accepted is the sender's Confirmed hook: a request accepted whole ends
// the run of failures.
func (s *sender) accepted(tags []ack.Tag, _ time.Time) {
	s.mu.Lock()
	s.failing = 0
	s.mu.Unlock()
	s.e.succeeded(tags)
}

// event reports retries as the extender's, and counts the run of whole
// requests failed for good: one of failingRequests over at least the
// stream ack deadline stops the Extender, since every lease of the source
// lapsed meanwhile and its redeliveries would too.
func (s *sender) event(ev event.Event) {
	if ev.Kind == event.Retry { // failures are the extender's to report
		s.e.emit(ev)
	}
	var ie *ack.IDError
	if ev.Kind != event.AckFailed || !errors.As(ev.Err, &ie) || !errors.Is(ie.Kind, ack.ErrPermanent) || ie.Reason != "" {
		return
	}
	now := time.Now()
	s.mu.Lock()
	if s.failing == 0 {
		s.since = now
	}
	s.failing++
	stop := s.failing >= failingRequests && now.Sub(s.since) >= s.e.cfg.StreamAckDeadline
	s.mu.Unlock()
	if stop {
		s.e.stop(fmt.Errorf("%w: %s: %w", ErrModacksFailing, s.sub, ie.Err))
	}
}

// dispatch queues the batch's modacks with their senders, in requests of
// at most 1000 ack ids and 512 KiB. A group with no sender leaves its
// leases to the next tick.
func (e *Extender) dispatch(b batcher, receipt bool) {
	now := time.Now().UnixNano()
	for _, g := range b {
		e.mu.Lock()
		a := e.senderLocked(g.senderKey)
		for _, t := range g.leases {
			l := t.(*lease)
			l.asked, l.secs, l.receipt = now, g.secs, receipt
			if a == nil && !l.gone.Load() && l.state != stateDropping {
				l.state = stateIdle
			}
		}
		e.mu.Unlock()
		if a == nil {
			continue
		}
		off := 0
		ackids.Split(g.ids, 0, 0, func(ids []string) {
			// An exactly-once lease is confirmed per ack id, and its
			// receipt modack goes at once: a message waits for it.
			a.ModackTags(ids, g.secs, g.eo, g.leases[off:off+len(ids)])
			off += len(ids)
		})
	}
}

// AckDone is the fate of the lease's last modack (the sender's Tag).
func (l *lease) AckDone(err error) {
	if err == nil {
		l.e.succeeded([]ack.Tag{l})
		return
	}
	l.e.failed(l, err)
}

// succeeded records accepted modacks: the new deadline, from the time
// each was asked, and a receipt's confirmation. A lease that had lapsed
// when asked is dropped: the server answers OK to a modack of an ack id
// it has given out again.
func (e *Extender) succeeded(tags []ack.Tag) {
	var lapsed []*lease
	extended := map[groupKey]int{}
	e.mu.Lock()
	for _, t := range tags {
		l, ok := t.(*lease)
		if !ok || l.gone.Load() || l.state == stateDropping {
			continue // released or being dropped meanwhile
		}
		st, asked := message.Of(l.m), time.Unix(0, l.asked)
		if st.Lapsed(asked) {
			l.state = stateDropping
			lapsed = append(lapsed, l)
			continue
		}
		length := time.Duration(l.secs) * time.Second
		st.SetDeadline(asked.Add(length), length)
		l.state = stateIdle
		if l.receipt {
			l.endConfirm()
		} else {
			extended[groupKey{senderKey: senderKey{st.Acks, l.m.Subscription}, secs: l.secs}]++
		}
	}
	e.mu.Unlock()
	e.expire(lapsed, errLapsed)
	for k, n := range extended {
		e.emit(event.Event{Kind: event.Extend, Subscription: k.sub, Count: n, Deadline: time.Duration(k.secs) * time.Second})
	}
}

// failed handles a modack that will not be retried (the sender logged
// it). An exactly-once lease is dropped if it was the receipt (the message
// must not be handed on unconfirmed) or the server refused its ack id for
// good; any other goes back to idle for the next tick, and lapses if none
// succeeds.
func (e *Extender) failed(l *lease, err error) {
	var ie *ack.IDError
	perID := errors.As(err, &ie) && ie.Reason != ""
	e.mu.Lock()
	if l.gone.Load() || l.state == stateDropping || e.closed && errors.Is(err, ack.ErrClosed) {
		e.mu.Unlock()
		return
	}
	// Read under the lock: once idle, the next tick may ask again.
	receipt, sub := l.receipt, l.m.Subscription
	drop := l.eo && (receipt || perID)
	l.state = stateIdle
	if drop {
		l.state = stateDropping
	}
	e.mu.Unlock()
	if receipt {
		if drop {
			e.drop([]*lease{l})
		}
		e.emit(event.Event{Kind: event.ReceiptModackFail, Subscription: sub, Count: 1, Err: err})
	} else if drop {
		e.expire([]*lease{l}, err)
	}
}

// modackTracer traces a sender's attempts: a "modack" span linked both
// ways to the messages' subscribe spans, which get "modack end" and, on
// success, "receipt modack" or "lease extended" events.
type modackTracer struct {
	e     *Extender
	names tracing.Names // of the sender's subscription
}

// StartRPC traces one modack attempt (ack.Tracer).
func (t *modackTracer) StartRPC(_ string, secs int32, _ []string, tags []ack.Tag) func(ack.Attempt) {
	var spans []trace.Span // nil unless a message is sampled
	receipt := false
	t.e.mu.Lock() // the sweep may forget a gone lease's message
	for i, tag := range tags {
		l, ok := tag.(*lease)
		if !ok {
			continue
		}
		receipt = l.receipt
		if l.m == nil {
			continue
		}
		if mt := message.Of(l.m).Trace; mt != nil && mt.Recording {
			if spans == nil {
				spans = make([]trace.Span, len(tags))
			}
			spans[i] = mt.Subscribe
		}
	}
	t.e.mu.Unlock()
	span := t.names.RPCSpan("modack", secs, spans, len(tags), tracing.AttrReceiptModack.Bool(receipt))
	return func(at ack.Attempt) {
		name, deadline := "lease extended", trace.WithAttributes(semconv.MessagingGCPPubsubMessageAckDeadline(int(secs)))
		if receipt {
			name = "receipt modack"
		}
		for _, s := range spans {
			if s != nil {
				s.AddEvent("modack end")
				if at.Err == nil {
					s.AddEvent(name, deadline)
				}
			}
		}
		if at.Err != nil {
			tracing.Fail(span, at.Err)
		}
		span.End()
	}
}
