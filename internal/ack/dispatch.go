package ack

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/retry"
)

// request is one RPC's worth of ack ids, through its retries.
type request struct {
	key     batchKey
	ids     []string
	tags    []Tag     // parallel to ids
	start   time.Time // first attempt: the retry deadline counts from here
	attempt int
	bo      *gax.Backoff  // retry pauses, from the first retry on
	due     time.Time     // next attempt, while waiting to be retried
	err     error         // last failure
	trace   func(Attempt) // ends the attempt's span when Config.Tracer is set
}

// dispatchLocked starts every RPC that is due and has a free slot: retries
// whose backoff has passed first (they are the oldest), then batches that
// are full, flushed, or find their kind idle.
func (a *Acknowledger) dispatchLocked() {
	if a.aborted {
		return
	}
	if len(a.retries) > 0 {
		a.dispatchRetriesLocked(time.Now())
	}
	for _, b := range a.order {
		if len(b.ids) > 0 {
			a.dispatchBatchLocked(b)
		}
	}
}

func (a *Acknowledger) dispatchRetriesLocked(now time.Time) {
	kept := a.retries[:0]
	for _, r := range a.retries {
		if !r.due.After(now) && a.inflight[r.key.kind] < a.cfg.MaxInFlight {
			a.startLocked(r)
			continue
		}
		kept = append(kept, r)
	}
	clear(a.retries[len(kept):])
	a.retries = kept
}

// dispatchBatchLocked cuts requests from the front of b with ackids.Split
// while slots are free. A partial last chunk stays unless the batch is
// being flushed or its kind is idle.
func (a *Acknowledger) dispatchBatchLocked(b *batch) {
	k := b.key.kind
	if a.inflight[k] >= a.cfg.MaxInFlight {
		return
	}
	all := b.flush || a.sendNowLocked(b.key)
	if !all && !b.full() {
		return
	}
	sent, sentBytes, stopped := 0, 0, false
	ackids.Split(b.ids, 0, 0, func(chunk []string) {
		if stopped || a.inflight[k] >= a.cfg.MaxInFlight {
			stopped = true
			return
		}
		if !all && sent+len(chunk) == len(b.ids) && len(chunk) < ackids.MaxIDs {
			stopped = true // a partial last chunk waits behind the RPC in flight
			return
		}
		r := &request{key: b.key, ids: chunk[:len(chunk):len(chunk)], start: time.Now()}
		r.tags = b.tags[sent : sent+len(chunk) : sent+len(chunk)]
		for _, id := range chunk {
			sentBytes += ackids.EncodedSize(id)
		}
		sent += len(chunk)
		a.startLocked(r)
	})
	if sent == 0 {
		return
	}
	a.pending -= sent
	if sent == len(b.ids) {
		b.reset(sent)
		return
	}
	b.ids = b.ids[sent:]
	b.tags = b.tags[sent:]
	b.bytes -= sentBytes
}

func (a *Acknowledger) startLocked(r *request) {
	a.lastSent[r.key.kind] = time.Now()
	a.inflight[r.key.kind]++
	if r.key.eo {
		a.eoInflight[r.key.kind]++
	}
	a.wg.Add(1)
	go a.run(r)
}

// run makes one attempt and settles its outcome.
func (a *Acknowledger) run(r *request) {
	defer a.wg.Done()
	if r.key.kind == kindAck {
		a.dropLapsed(r)
		if len(r.ids) == 0 {
			a.complete(r, nil)
			return
		}
	}
	r.attempt++
	if a.cfg.Tracer != nil {
		r.trace = a.cfg.Tracer.StartRPC(r.key.op(), r.key.seconds, r.ids, r.tags)
	}
	a.complete(r, a.call(r))
}

// bestEffortAfterClose reports whether ids of key are no longer retried
// because Close has begun: a nack nobody waits on (not exactly-once) that
// fails loses nothing — the server redelivers the message at its deadline
// — so Close does not wait out its backoff.
func (a *Acknowledger) bestEffortAfterClose(key batchKey) bool {
	if !key.nack || key.eo {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// dropLapsed leaves out of r the acks whose message has lapsed (Lapser):
// their tags hear ErrLapsed, and the server never sees them.
func (a *Acknowledger) dropLapsed(r *request) {
	now := time.Now()
	lapsed := func(t Tag) bool {
		l, ok := t.(Lapser)
		return ok && l.Lapsed(now)
	}
	if !slices.ContainsFunc(r.tags, lapsed) {
		return // the common case: nothing lapsed, nothing copied
	}
	var ids []string
	var tags []Tag
	var gone []int
	for i, t := range r.tags {
		if lapsed(t) {
			gone = append(gone, i)
			continue
		}
		ids, tags = append(ids, r.ids[i]), append(tags, t)
	}
	for _, i := range gone {
		r.tags[i].AckDone(&IDError{AckID: r.ids[i], Kind: ErrLapsed})
	}
	r.ids, r.tags = ids, tags
	a.mu.Lock()
	a.unacked -= int64(len(gone))
	a.mu.Unlock()
}

func (a *Acknowledger) call(r *request) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.RPCTimeout)
	defer cancel()
	var err error
	if r.key.kind == kindAck {
		_, err = a.client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: a.sub, AckIds: r.ids})
		if err != nil {
			err = fmt.Errorf("ack: Acknowledge %d ack ids: %w", len(r.ids), err)
		}
	} else {
		_, err = a.client.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: a.sub, AckIds: r.ids, AckDeadlineSeconds: r.key.seconds})
		if err != nil {
			err = fmt.Errorf("ack: ModifyAckDeadline(%ds) %d ack ids: %w", r.key.seconds, len(r.ids), err)
		}
	}
	return err
}

// outcome sorts a request's ack ids after an attempt.
type outcome struct {
	ok     int      // confirmed
	failed []int    // indexes failed for good
	reason []string // their per-id reasons ("" when the RPC's)
	retry  []int    // indexes to retry
}

func (a *Acknowledger) classify(r *request, err error) outcome {
	if err == nil {
		return outcome{ok: len(r.ids)}
	}
	var o outcome
	if reasons := ackids.FailureReasons(err); reasons != nil {
		for i, id := range r.ids {
			switch reason, has := reasons[id]; {
			case !has:
				o.ok++ // the server applied the ids it did not list
			case ackids.Transient(reason):
				o.retry = append(o.retry, i)
			default:
				o.failed = append(o.failed, i)
				o.reason = append(o.reason, reason)
			}
		}
		return o
	}
	idx := make([]int, len(r.ids))
	for i := range idx {
		idx[i] = i
	}
	if retry.Transient(err) {
		o.retry = idx
	} else {
		o.failed = idx
		o.reason = make([]string, len(idx))
	}
	return o
}

// complete settles an attempt: confirmed ids resolve, permanent failures
// fail, transient ones wait for their backoff unless the retry deadline
// has passed or the acknowledger was closed.
func (a *Acknowledger) complete(r *request, err error) {
	a.mu.Lock()
	aborted := a.aborted
	a.mu.Unlock()

	var s settlement
	if err != nil && aborted {
		a.failAll(r, ErrClosed, err)
	} else {
		s = a.settle(r, err, time.Now())
	}
	if r.trace != nil {
		r.trace(traceAttempt(len(r.ids), err, err != nil && aborted, s.exhausted, s.o))
	}

	a.mu.Lock()
	if s.again != nil && a.aborted {
		defer a.failAll(s.again, ErrClosed, err) // after the unlock below
		s.again = nil
	}
	a.endAttemptLocked(r, s.again)
	a.mu.Unlock()

	for _, e := range s.evs {
		a.events.Emit(e)
	}
	// Flush and Close return only once the outcome is reported: a caller
	// that flushed finds the outcome told and the events seen.
	a.mu.Lock()
	a.reporting--
	a.noteIdleLocked()
	a.mu.Unlock()
}

// settlement is what settle decided for an attempt, for complete to act
// on once the acknowledger's counts are updated.
type settlement struct {
	o         outcome
	evs       []event.Event // to emit
	again     *request      // the ids to retry after their backoff (nil: none)
	exhausted bool          // the retries ran out (for the trace)
}

// settle sorts an attempt that was not aborted: it resolves the ids the
// server accepted, fails the permanent failures, and leaves the transient
// ones to retryLater.
func (a *Acknowledger) settle(r *request, err error, now time.Time) settlement {
	s := settlement{o: a.classify(r, err)}
	a.resolveOK(r, s.o, err == nil, now)
	if s.o.ok > 0 {
		switch {
		case r.key.kind == kindAck:
			s.evs = append(s.evs, event.Event{Kind: event.Ack, Subscription: a.sub, Count: s.o.ok})
		case r.key.nack:
			s.evs = append(s.evs, event.Event{Kind: event.Nack, Subscription: a.sub, Count: s.o.ok})
		}
	}
	if n := len(s.o.failed); n > 0 {
		first := a.failIndexes(r, s.o.failed, s.o.reason, ErrPermanent, err)
		s.evs = append(s.evs, event.Event{Kind: event.AckFailed, Subscription: a.sub, Count: n, Err: first})
		a.log.Warn("pubsubflow: ack ids failed for good", "subscription", a.sub, "count", n, "err", first)
	}
	if len(s.o.retry) > 0 {
		a.retryLater(r, err, now, &s)
	}
	return s
}

// retryLater sets s.again to the transient failures of r, due after
// their backoff, unless that pause would pass the retry deadline or they
// are best-effort nacks after Close: then they fail with
// ErrRetryExhausted, so no id is retried past its deadline.
func (a *Acknowledger) retryLater(r *request, err error, now time.Time, s *settlement) {
	again := r.subset(s.o.retry)
	again.err = err
	again.bo = r.pauses()
	delay := again.bo.Pause()
	n := len(again.ids)
	if now.Add(delay).After(r.start.Add(a.cfg.retryDeadline(r.key.eo))) || a.bestEffortAfterClose(r.key) {
		first := a.failIndexes(again, nil, nil, ErrRetryExhausted, err)
		s.evs = append(s.evs, event.Event{Kind: event.AckFailed, Subscription: a.sub, Count: n, Err: first})
		a.log.Warn("pubsubflow: ack retries exhausted", "subscription", a.sub, "count", n, "err", err)
		s.exhausted = true
		return
	}
	again.due = now.Add(delay)
	s.again = again
	s.evs = append(s.evs, event.Event{Kind: event.Retry, Subscription: a.sub, Count: n, Delay: delay, Err: err})
	a.log.Debug("pubsubflow: ack retry", "subscription", a.sub, "count", n, "delay", delay, "err", err)
}

// endAttemptLocked gives back r's slot and queues again (its ids to
// retry, or nil), then starts what the free slot lets go. The attempt
// counts as reporting until complete has told the events, so
// that Flush and Close wait for that.
func (a *Acknowledger) endAttemptLocked(r, again *request) {
	finished := len(r.ids)
	if again != nil {
		finished -= len(again.ids)
		a.retries = append(a.retries, again)
		a.armRetryLocked()
	}
	a.inflight[r.key.kind]--
	if r.key.eo {
		a.eoInflight[r.key.kind]--
	}
	if r.key.counts() {
		a.unacked -= int64(finished)
	}
	a.reporting++
	a.dispatchLocked()
	a.armRetryLocked()
}

// resolveOK tells the tags of the ids the server accepted.
func (a *Acknowledger) resolveOK(r *request, o outcome, all bool, now time.Time) {
	if o.ok == 0 {
		return
	}
	if all {
		if a.cfg.Confirmed != nil {
			a.cfg.Confirmed(r.tags, now)
			return
		}
		for _, t := range r.tags {
			if t != nil {
				t.AckDone(nil)
			}
		}
		return
	}
	done := make([]bool, len(r.ids))
	for _, i := range o.failed {
		done[i] = true
	}
	for _, i := range o.retry {
		done[i] = true
	}
	for i, t := range r.tags {
		if !done[i] && t != nil {
			t.AckDone(nil)
		}
	}
}

// subset is a new request for the given indexes of r (for a retry).
func (r *request) subset(idx []int) *request {
	if len(idx) == len(r.ids) {
		return &request{key: r.key, ids: r.ids, tags: r.tags, start: r.start, attempt: r.attempt, bo: r.bo}
	}
	s := &request{key: r.key, ids: make([]string, len(idx)), tags: make([]Tag, len(idx)), start: r.start, attempt: r.attempt, bo: r.bo}
	for j, i := range idx {
		s.ids[j] = r.ids[i]
		s.tags[j] = r.tags[i]
	}
	return s
}

// failIndexes tells the tags of the given indexes of r (all when idx is
// nil) that they failed with an *IDError of kind, and returns the first
// such error (for the event). Exactly-once ids get an error each (their
// reason differs); the others share the first.
func (a *Acknowledger) failIndexes(r *request, idx []int, reasons []string, kind, err error) error {
	n := len(idx)
	if idx == nil {
		n = len(r.ids)
	}
	var first error
	for j := range n {
		i := j
		if idx != nil {
			i = idx[j]
		}
		t := r.tags[i]
		if first != nil && !r.key.eo {
			if t != nil {
				t.AckDone(first)
			}
			continue
		}
		e := &IDError{AckID: r.ids[i], Kind: kind, Err: err}
		if reasons != nil {
			e.Reason = reasons[j]
		}
		if first == nil {
			first = e
		}
		if t != nil {
			t.AckDone(e)
		}
	}
	return first
}

// failAll fails every ack id of r with kind and reports them.
func (a *Acknowledger) failAll(r *request, kind, err error) {
	if len(r.ids) == 0 {
		return
	}
	a.emitFailed(len(r.ids), a.failIndexes(r, nil, nil, kind, err))
}

// pauses returns the request's retry pauses (internal/retry's backoff):
// from 100 ms up to 60 s, or for exactly-once from 1 s up to 64 s, as
// Google's clients.
func (r *request) pauses() *gax.Backoff {
	if r.bo == nil {
		bo := retry.Backoff(100*time.Millisecond, 60*time.Second)
		if r.key.eo {
			bo = retry.Backoff(time.Second, 64*time.Second)
		}
		r.bo = &bo
	}
	return r.bo
}
