package ack

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/retry"
)

// kind is the RPC an ack id goes out with; each has its own in-flight
// bound, so slow acks never hold back deadline extensions.
type kind uint8

const (
	kindAck kind = iota
	kindModack
	numKinds
)

// batchKey identifies ack ids that can share a request.
type batchKey struct {
	kind    kind
	seconds int32 // ModifyAckDeadline seconds
	nack    bool  // reported as nacks (event.Nack)
	eo      bool  // exactly-once: per-id failures, long retries
}

// op names a request's RPC as the official clients name its span.
func (k batchKey) op() string {
	if k.kind == kindAck {
		return "ack"
	}
	if k.nack {
		return "nack"
	}
	return "modack"
}

// bestEffort reports whether a failure of these ids loses nothing worth
// waiting for once Close has begun: a nack nobody waits on, whose message
// the server redelivers at its deadline anyway.
func (k batchKey) bestEffort() bool { return k.nack && !k.eo }

// budget is the encoded bytes of ack ids one request may carry: what
// ackids.Split allows (it keeps 1 KiB for the other fields).
const budget = ackids.MaxBytes - 1024

// batch accumulates ack ids for one key. ids is only ever appended to or
// cut from the front, and requests keep cap-limited prefixes of it, so
// later appends never touch an id slice a request is sending.
type batch struct {
	key   batchKey
	ids   []string
	tags  []Tag // parallel to ids (nil entries: nobody listens)
	bytes int   // encoded size of ids
	flush bool  // send everything, partial chunks included
	hint  int   // capacity for the next arrays (the last request's size)
}

func (b *batch) add(id string, t Tag) {
	if b.ids == nil {
		b.ids = make([]string, 0, min(max(b.hint, 16), ackids.MaxIDs))
		b.tags = make([]Tag, 0, cap(b.ids))
	}
	b.ids = append(b.ids, id)
	b.tags = append(b.tags, t)
	b.bytes += ackids.EncodedSize(id)
}

// addAll appends many ids at once. An empty batch adopts the slices,
// capped at their length, so that a later add copies them rather than
// write past their end into an array the caller may have cut them from.
func (b *batch) addAll(ids []string, tags []Tag) {
	if len(b.ids) == 0 {
		b.ids, b.tags = ids[:len(ids):len(ids)], tags[:len(tags):len(tags)]
	} else {
		b.ids, b.tags = append(b.ids, ids...), append(b.tags, tags...)
	}
	for _, id := range ids {
		b.bytes += ackids.EncodedSize(id)
	}
}

// full reports whether a whole request's worth is waiting.
func (b *batch) full() bool { return len(b.ids) >= ackids.MaxIDs || b.bytes > budget }

// reset empties the batch; capHint sizes the next arrays, made when the
// next id comes (the arrays of sent ids belong to their requests now).
func (b *batch) reset(capHint int) {
	b.ids, b.tags, b.hint = nil, nil, capHint
	b.bytes = 0
	b.flush = false
}

// request is one RPC's worth of ack ids, through its retries.
type request struct {
	key   batchKey
	ids   []string
	tags  []Tag         // parallel to ids
	start time.Time     // first attempt: the retry deadline counts from here
	bo    *gax.Backoff  // retry pauses, from the first retry on
	due   time.Time     // next attempt, while waiting to be retried
	err   error         // last failure
	trace func(Attempt) // ends the attempt's span when Config.Tracer is set
}

// dispatchLocked starts every RPC that is due and has a free slot: retries
// whose backoff has passed first (they are the oldest), then batches that
// are full, flushed, or find their kind idle.
func (a *Acknowledger) dispatchLocked() {
	if a.aborted {
		return
	}
	if len(a.retries) > 0 {
		now := time.Now()
		a.retries = slices.DeleteFunc(a.retries, func(r *request) bool {
			due := !r.due.After(now) && a.inflight[r.key.kind] < a.cfg.MaxInFlight
			if due {
				a.startLocked(r)
			}
			return due
		})
	}
	for _, b := range a.order {
		if len(b.ids) > 0 {
			a.dispatchBatchLocked(b)
		}
	}
}

// dispatchBatchLocked cuts requests from the front of b with ackids.Split
// while slots are free. A partial last chunk stays unless the batch is
// being flushed or its kind may send now.
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
		n := len(chunk)
		partial := !all && sent+n == len(b.ids) && n < ackids.MaxIDs
		if stopped || partial || a.inflight[k] >= a.cfg.MaxInFlight {
			stopped = true
			return
		}
		for _, id := range chunk {
			sentBytes += ackids.EncodedSize(id)
		}
		a.startLocked(&request{key: b.key, ids: chunk[:n:n], tags: b.tags[sent : sent+n : sent+n], start: time.Now()})
		sent += n
	})
	a.pending -= sent
	if sent == len(b.ids) {
		b.reset(sent)
		return
	}
	b.ids, b.tags, b.bytes = b.ids[sent:], b.tags[sent:], b.bytes-sentBytes
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
	if a.cfg.Tracer != nil {
		r.trace = a.cfg.Tracer.StartRPC(r.key.op(), r.key.seconds, r.ids, r.tags)
	}
	a.complete(r, a.call(r))
}

// dropLapsed leaves out of r the acks whose message has lapsed (Lapser):
// their tags hear ErrLapsed, and the server never sees them. r's arrays
// are its own, so they are compacted in place.
func (a *Acknowledger) dropLapsed(r *request) {
	now := time.Now()
	n := 0
	for i, t := range r.tags {
		if l, ok := t.(Lapser); ok && l.Lapsed(now) {
			t.AckDone(&IDError{AckID: r.ids[i], Kind: ErrLapsed})
			continue
		}
		r.ids[n], r.tags[n] = r.ids[i], t
		n++
	}
	r.ids, r.tags = r.ids[:n], r.tags[:n]
}

func (a *Acknowledger) call(r *request) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.RPCTimeout)
	defer cancel()
	if r.key.kind == kindAck {
		if _, err := a.client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: a.sub, AckIds: r.ids}); err != nil {
			return fmt.Errorf("ack: Acknowledge %d ack ids: %w", len(r.ids), err)
		}
		return nil
	}
	req := &pubsubpb.ModifyAckDeadlineRequest{Subscription: a.sub, AckIds: r.ids, AckDeadlineSeconds: r.key.seconds}
	if _, err := a.client.ModifyAckDeadline(ctx, req); err != nil {
		return fmt.Errorf("ack: ModifyAckDeadline(%ds) %d ack ids: %w", r.key.seconds, len(r.ids), err)
	}
	return nil
}

// outcome sorts a request's ack ids, by index, after a failed attempt.
type outcome struct {
	ok, failed, retry []int
	reasons           map[string]string // per ack id (nil: the failure is the RPC's)
}

const transientPrefix, permanentPrefix = "TRANSIENT_FAILURE_", "PERMANENT_FAILURE_"

// classify sorts ids after an attempt that failed with err. An
// exactly-once failure maps ack ids to TRANSIENT_FAILURE_* and
// PERMANENT_FAILURE_* reasons in an errdetails.ErrorInfo's metadata (ids
// it does not list were applied); without such entries, whatever other
// ErrorInfo err carries (AIP-193 attaches one to most errors), the
// failure is the whole RPC's and its status decides for all.
func classify(ids []string, err error) (o outcome) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		info, _ := d.(*errdetails.ErrorInfo)
		for id, reason := range info.GetMetadata() {
			if strings.HasPrefix(reason, transientPrefix) || strings.HasPrefix(reason, permanentPrefix) {
				if o.reasons == nil {
					o.reasons = map[string]string{}
				}
				o.reasons[id] = reason
			}
		}
	}
	retryAll := o.reasons == nil && retry.Transient(err)
	for i, id := range ids {
		reason, has := o.reasons[id]
		switch {
		case retryAll || strings.HasPrefix(reason, transientPrefix):
			o.retry = append(o.retry, i)
		case o.reasons == nil || has:
			o.failed = append(o.failed, i)
		default:
			o.ok = append(o.ok, i)
		}
	}
	return o
}

// complete settles an attempt, traces it, and gives back its slot, with
// the ids to retry queued (after Close gave up, those fail instead).
func (a *Acknowledger) complete(r *request, err error) {
	a.mu.Lock()
	aborted, closed := a.aborted, a.closed
	a.mu.Unlock()
	var o outcome
	var again *request
	if err != nil && aborted {
		o.failed = a.fail(r, nil, nil, ErrClosed, err)
	} else {
		o, again = a.settle(r, err, closed)
	}
	if r.trace != nil {
		r.trace(Attempt{Err: err, Failed: o.failed, Retry: o.retry})
	}
	a.mu.Lock()
	lost := again
	if !a.aborted {
		lost = nil
		if again != nil {
			a.retries = append(a.retries, again)
		}
	}
	a.inflight[r.key.kind]--
	if r.key.eo {
		a.eoInflight[r.key.kind]--
	}
	a.dispatchLocked()
	a.armRetryLocked()
	a.noteIdleLocked()
	a.mu.Unlock()
	if lost != nil {
		a.fail(lost, nil, nil, ErrClosed, err)
	}
}

// settle resolves the ids the server accepted and fails the permanent
// failures. The transient ones it returns as the request to retry after
// their backoff, unless that would pass their retry deadline or they are
// best-effort and Close has begun: then they fail with ErrRetryExhausted.
func (a *Acknowledger) settle(r *request, err error, closed bool) (outcome, *request) {
	now := time.Now()
	var o outcome
	if err != nil {
		o = classify(r.ids, err)
	}
	if n := a.resolve(r, err, o, now); n > 0 && (r.key.kind == kindAck || r.key.nack) {
		kind := event.Nack
		if r.key.kind == kindAck {
			kind = event.Ack
		}
		a.cfg.Events.Emit(event.Event{Kind: kind, Subscription: a.sub, Count: n})
	}
	if len(o.failed) > 0 {
		a.fail(r, o.failed, o.reasons, ErrPermanent, err)
	}
	if len(o.retry) == 0 {
		return o, nil
	}
	again := r.subset(o.retry)
	again.err = err
	delay := again.pauses().Pause()
	limit := cmp.Or(a.cfg.RetryDeadline, defaultRetryDeadline)
	if r.key.eo {
		limit = cmp.Or(a.cfg.RetryDeadline, eoRetryDeadline)
	}
	if now.Add(delay).After(r.start.Add(limit)) || closed && r.key.bestEffort() {
		a.fail(again, nil, nil, ErrRetryExhausted, err)
		o.failed, o.retry = append(o.failed, o.retry...), nil
		return o, nil
	}
	again.due = now.Add(delay)
	a.cfg.Events.Emit(event.Event{Kind: event.Retry, Subscription: a.sub, Count: len(again.ids), Delay: delay, Err: err})
	a.cfg.Logger.Debug("pubsubflow: ack retry", "subscription", a.sub, "count", len(again.ids), "delay", delay, "err", err)
	return o, again
}

// resolve tells the tags of the ids the server accepted (all of them at
// once through Config.Confirmed when err is nil) and returns how many.
func (a *Acknowledger) resolve(r *request, err error, o outcome, now time.Time) int {
	if err != nil {
		for _, i := range o.ok {
			if t := r.tags[i]; t != nil {
				t.AckDone(nil)
			}
		}
		return len(o.ok)
	}
	if a.cfg.Confirmed != nil && len(r.tags) > 0 {
		a.cfg.Confirmed(r.tags, now)
		return len(r.tags)
	}
	for _, t := range r.tags {
		if t != nil {
			t.AckDone(nil)
		}
	}
	return len(r.tags)
}

// subset is the request of r's ids at idx (for a retry).
func (r *request) subset(idx []int) *request {
	s := *r
	if len(idx) < len(r.ids) {
		s.ids, s.tags = make([]string, len(idx)), make([]Tag, len(idx))
		for j, i := range idx {
			s.ids[j], s.tags[j] = r.ids[i], r.tags[i]
		}
	}
	return &s
}

// pauses returns the request's retry pauses: from 100 ms up to 60 s, or
// for exactly-once from 1 s up to 64 s, as Google's clients.
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

// fail tells the tags of r's ids at idx (all when idx is nil) that they
// failed with an *IDError of kind, reports them as one AckFailed event,
// and returns the indexes. Exactly-once ids get an error each (their
// reasons differ); the others share the first.
func (a *Acknowledger) fail(r *request, idx []int, reasons map[string]string, kind, err error) []int {
	if idx == nil {
		idx = make([]int, len(r.ids))
		for i := range idx {
			idx[i] = i
		}
	}
	if len(idx) == 0 {
		return idx
	}
	var first, e error
	for _, i := range idx {
		if first == nil || r.key.eo {
			e = &IDError{AckID: r.ids[i], Reason: reasons[r.ids[i]], Kind: kind, Err: err}
			if first == nil {
				first = e
			}
		}
		if t := r.tags[i]; t != nil {
			t.AckDone(e)
		}
	}
	a.cfg.Events.Emit(event.Event{Kind: event.AckFailed, Subscription: a.sub, Count: len(idx), Err: first})
	a.cfg.Logger.Warn(failMsg[kind], "subscription", a.sub, "count", len(idx), "err", first)
	return idx
}

var failMsg = map[error]string{
	ErrPermanent:      "pubsubflow: ack ids failed for good",
	ErrRetryExhausted: "pubsubflow: ack retries exhausted",
	ErrClosed:         "pubsubflow: ack ids failed",
}
