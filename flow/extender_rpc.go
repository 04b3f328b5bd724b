package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

// job is one group of modacks: ids[i] is the ack id of leases[i], each
// lease as the ack.Tag its sender tells its fate (the slices go to the
// sender as they are).
type job struct {
	src     *ack.Acknowledger // the messages' source's (nil: built by hand)
	sub     string
	secs    int32
	ids     []string
	leases  []ack.Tag // *lease
	receipt bool      // the receipt modack (else an extension)
}

// senderKey names a sender: the source whose messages it extends (its
// acknowledger), and the subscription for messages that no source
// received (src nil).
type senderKey struct {
	src *ack.Acknowledger
	sub string
}

// senderLocked is the acknowledger that sends the modacks of k's messages
// (nil after Close): through their source's client, so each message is
// extended on the connection, server and subscription it came from; a
// message built by hand, through the Extender's own client. A closed
// source has none (its messages are settled). Called with mu held.
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
	a, err := ack.New(client, k.sub, ack.Config{
		MaxInFlight:   e.cfg.MaxInFlight,
		RetryDeadline: e.cfg.RetryDeadline,
		RPCTimeout:    attemptTimeout,
		Confirmed:     sd.accepted,
		Tracer:        e.ackTracer(),
		Events:        sd.event,
		Logger:        e.log,
	})
	if err != nil { // the config was validated: cannot happen
		panic(fmt.Sprintf("flow: acknowledger for %s: %v", k.sub, err))
	}
	sd.a = a
	e.senders[k] = sd
	return a
}

// pruneSenders closes and forgets the senders of sources that were
// closed (the tick calls it): a closed source has settled every message
// it held, so nothing of theirs is left to extend, and an Extender that
// outlives many sources keeps only the senders of live ones. What such a
// sender still has queued or in flight is abandoned at once.
func (e *Extender) pruneSenders() {
	var gone []*sender
	e.mu.Lock()
	for k, sd := range e.senders {
		if k.src != nil && k.src.Closed() {
			gone = append(gone, sd)
			delete(e.senders, k)
		}
	}
	e.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, sd := range gone {
		_ = sd.a.Close(ctx)
	}
}

// failingRequests is how many modack requests in a row, at the least,
// must fail for good (over at least the stream ack deadline) before the
// Extender stops: a refusal or two is the server's word on those ack ids,
// not on the source.
const failingRequests = 5

// sender is one source's sender of modacks, with its run of requests
// that failed for good.
type sender struct {
	e   *Extender
	a   *ack.Acknowledger
	sub string

	mu      sync.Mutex
	failing int       // requests failed for good since the last accepted
	since   time.Time // when the first of them failed
}

// accepted is the sender's Confirmed hook: a request the server accepted
// whole ends the run of failures.
func (s *sender) accepted(tags []ack.Tag, _ time.Time) {
	s.mu.Lock()
	s.failing = 0
	s.mu.Unlock()
	s.e.succeeded(tags)
}

// event sees the sender's events: retries are reported as the
// extender's; a request that failed for good as a whole (a status that
// is not retried, not a per-ack-id reason) extends the run of failures,
// and a run of failingRequests over at least the stream ack deadline
// stops the Extender: every lease of the source has lapsed meanwhile, and
// its redeliveries would lapse too.
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

// dispatch queues the jobs' modacks with their senders. It never waits: a
// tick is never held up by RPCs in flight or retrying.
func (e *Extender) dispatch(jobs []job) {
	now := time.Now().UnixNano()
	for _, j := range jobs {
		e.mu.Lock()
		a := e.senderLocked(senderKey{j.src, j.sub})
		for _, t := range j.leases {
			l := t.(*lease)
			l.asked, l.secs, l.receipt = now, j.secs, j.receipt
		}
		e.mu.Unlock()
		if a == nil {
			e.abandon(j)
			continue
		}
		// An exactly-once lease is confirmed per ack id, and its receipt
		// modack is sent at once: a message waits for it.
		a.ModackTags(j.ids, j.secs, j.leases[0].(*lease).eo(), j.leases)
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

// succeeded records accepted modacks: a new expiry from the time each was
// asked, and for a receipt modack the confirmation exactly-once messages
// wait for. A lease that had lapsed when its modack was asked stays lapsed:
// the server answers OK to a modack of an ack id it has given out again.
func (e *Extender) succeeded(tags []ack.Tag) {
	var lapsed []*lease
	extended := map[groupKey]int{}
	e.mu.Lock()
	for _, t := range tags {
		l, ok := t.(*lease)
		if !ok || l.gone.Load() || l.state == stateDropping {
			continue // released or being dropped meanwhile
		}
		if l.asked >= l.lapse {
			l.state = stateDropping
			lapsed = append(lapsed, l)
			continue
		}
		length := time.Duration(l.secs) * time.Second
		expiry := l.asked + int64(length)
		l.expiry, l.lapse = expiry, expiry-int64(message.Margin(length))
		message.Of(l.m).SetDeadline(time.Unix(0, expiry), length)
		l.state = stateIdle
		if l.receipt {
			l.endConfirm()
		} else {
			extended[groupKey{src: message.Of(l.m).Acks, sub: l.m.Subscription, secs: l.secs}]++
		}
	}
	e.mu.Unlock()
	e.expire(lapsed, errLapsed)
	for gk, n := range extended {
		e.emit(event.Event{Kind: event.Extend, Subscription: gk.sub, Count: n, Deadline: time.Duration(gk.secs) * time.Second})
	}
}

// failed handles a modack that will not be retried (the sender retried
// transient failures within RetryDeadline). A lease that cannot be kept is
// dropped and its message settled as Expired: an exactly-once receipt
// modack that failed in any way (the message must not be handed on
// unconfirmed), and an exactly-once ack id the server refused for good.
// Any other lease goes back to idle, so the next tick tries again (it
// lapses at its deadline if none succeeds). A receipt modack's failure is
// an event of its own; failed extensions are logged once per tick.
func (e *Extender) failed(l *lease, err error) {
	var ie *ack.IDError
	perID := errors.As(err, &ie) && ie.Reason != ""
	e.mu.Lock()
	if l.gone.Load() || l.state == stateDropping || e.closed && errors.Is(err, ack.ErrClosed) {
		e.mu.Unlock()
		return
	}
	// Read under the lock: once idle, the lease may be asked again (and
	// its fields rewritten) by the next tick.
	receipt := l.receipt
	drop := l.eo() && (receipt || perID)
	if drop {
		l.state = stateDropping
	} else {
		l.state = stateIdle
	}
	e.mu.Unlock()
	if receipt {
		if drop {
			e.drop([]*lease{l})
		}
		e.emit(event.Event{Kind: event.ReceiptModackFail, Subscription: l.m.Subscription, Count: 1, Err: err})
		return
	}
	e.failures.add(err)
	if drop {
		e.expire([]*lease{l}, err)
	}
}

// failures counts lease extensions that failed between two reports.
type failures struct {
	mu         sync.Mutex
	extensions int
	last       error
}

func (f *failures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.extensions++
	f.last = err
}

// report logs the extensions that failed since the last report (the loop
// calls it every tick), so a failing subscription logs once a tick, not
// once a lease.
func (e *Extender) report() {
	f := &e.failures
	f.mu.Lock()
	extensions, last := f.extensions, f.last
	f.extensions, f.last = 0, nil
	f.mu.Unlock()
	if extensions > 0 {
		e.log.Warn("flow: extensions failed; the next tick retries, or the leases lapse", "count", extensions, "err", last)
	}
}

// abandon returns a job's leases to idle without having extended them.
func (e *Extender) abandon(j job) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range j.leases {
		if l := t.(*lease); !l.gone.Load() && l.state != stateDropping {
			l.state = stateIdle
		}
	}
}
