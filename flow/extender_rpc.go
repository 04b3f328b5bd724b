package flow

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/retry"
)

// job is one ModifyAckDeadline request: ids[i] is the ack id of leases[i].
type job struct {
	sub     string
	secs    int32
	ids     []string
	leases  []*lease
	receipt bool // the receipt modack (else an extension)
}

// worker runs jobs until Close. MaxInFlight workers bound the RPCs in
// flight; they serve nothing but this extender, so acks never queue ahead.
func (e *Extender) worker() {
	defer e.workers.Done()
	for {
		select {
		case <-e.ready:
			for {
				j, ok := e.nextJob()
				if !ok {
					break
				}
				e.run(j)
			}
		case <-e.quit:
			return
		}
	}
}

// nextJob takes the oldest queued job.
func (e *Extender) nextJob() (job, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) == 0 {
		return job{}, false
	}
	j := e.queue[0]
	e.queue[0] = job{}
	e.queue = e.queue[1:]
	return j, true
}

// failure is an ack id that will not be retried, and why.
type failure struct {
	l     *lease
	err   error
	perID bool // the server named this ack id (exactly-once), not the whole call
}

// run sends j, retrying transient failures (the whole call, or single ack
// ids on exactly-once subscriptions) with internal/retry's backoff
// for up to RetryDeadline.
func (e *Extender) run(j job) {
	start := time.Now()
	bo := retry.Backoff(backoffInitial, backoffMax)
	for {
		sentAt := time.Now()
		endTrace := e.startTrace(j)
		ctx, cancel := context.WithTimeout(e.rpcCtx, attemptTimeout)
		_, err := e.client.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription:       j.sub,
			AckIds:             j.ids,
			AckDeadlineSeconds: j.secs,
		})
		cancel()
		if endTrace != nil {
			endTrace(err)
		}
		if err != nil && e.rpcCtx.Err() != nil {
			e.abandon(j) // Close cancelled the call: not the server's verdict
			return
		}
		ok, again, failed := classify(j, err)
		e.succeeded(j, ok, sentAt)
		if len(again) == 0 {
			e.failed(j, failed)
			return
		}
		j = subJob(j, again)
		delay := bo.Pause()
		if time.Since(start)+delay > e.cfg.RetryDeadline {
			for _, l := range j.leases {
				failed = append(failed, failure{l: l, err: fmt.Errorf("lease: modack retries exhausted after %v: %w", e.cfg.RetryDeadline, err)})
			}
			e.failed(j, failed)
			return
		}
		e.failed(j, failed)
		e.emit(event.Event{Kind: event.Retry, Subscription: j.sub, Count: len(j.ids), Delay: delay, Err: err})
		e.log.Debug("lease: modack retry", "subscription", j.sub, "count", len(j.ids), "delay", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-e.quit:
			t.Stop()
			e.abandon(j)
			return
		}
	}
}

// subJob narrows j to the leases in keep (a subset, in j's order).
func subJob(j job, keep []*lease) job {
	n := job{sub: j.sub, secs: j.secs, receipt: j.receipt, leases: keep, ids: make([]string, len(keep))}
	for i, l := range keep {
		n.ids[i] = l.m.AckID
	}
	return n
}

// classify splits j's leases by the call's outcome. On exactly-once
// subscriptions the server names failed ack ids in an ErrorInfo's metadata
// (reason TRANSIENT_FAILURE_* or PERMANENT_FAILURE_*); ack ids not named
// there succeeded.
func classify(j job, err error) (ok, again []*lease, failed []failure) {
	if err == nil {
		return j.leases, nil, nil
	}
	if reasons := ackids.FailureReasons(err); reasons != nil {
		for _, l := range j.leases {
			reason, named := reasons[l.m.AckID]
			switch {
			case !named:
				ok = append(ok, l)
			case ackids.Transient(reason):
				again = append(again, l)
			default:
				failed = append(failed, failure{l: l, perID: true, err: fmt.Errorf("lease: ack id failed (%s): %w", reason, err)})
			}
		}
		return ok, again, failed
	}
	if retry.Transient(err) {
		return nil, j.leases, nil
	}
	for _, l := range j.leases {
		failed = append(failed, failure{l: l, err: fmt.Errorf("lease: modack: %w", err)})
	}
	return nil, nil, failed
}

// succeeded records a successful modack sent at sentAt: new expiry, and for
// a receipt modack the confirmation exactly-once messages wait for.
func (e *Extender) succeeded(j job, ok []*lease, sentAt time.Time) {
	if len(ok) == 0 {
		return
	}
	expiry := sentAt.Add(time.Duration(j.secs) * time.Second)
	expiryNs := expiry.UnixNano()
	n := 0
	var lapsed []*lease
	e.mu.Lock()
	for _, l := range ok {
		if l.gone.Load() || l.state == stateDropping {
			continue // released or being dropped meanwhile
		}
		if sentAt.UnixNano() >= l.lapse {
			// Sent when the lease had (nearly) lapsed: the server answers
			// OK to a modack of an ack id it has already given out again,
			// so this success proves nothing. Drop it.
			l.state = stateDropping
			lapsed = append(lapsed, l)
			continue
		}
		n++
		length := time.Duration(j.secs) * time.Second
		l.expiry, l.lapse = expiryNs, expiryNs-int64(message.Margin(length))
		message.Of(l.m).SetDeadline(expiry, length)
		l.state = stateIdle
		if j.receipt {
			l.endConfirm()
		}
	}
	e.mu.Unlock()
	e.expire(lapsed, errLapsed)
	if !j.receipt && n > 0 {
		e.emit(event.Event{Kind: event.Extend, Subscription: j.sub, Count: n, Deadline: time.Duration(j.secs) * time.Second})
	}
}

// failed handles ack ids that will not be retried. A lease that cannot be
// kept is dropped and its message settled as Expired: exactly-once receipt
// modacks that failed in any way (the message must not be handed on
// unconfirmed), and exactly-once ack ids the server reported as
// permanently failed. Any other lease goes back to idle, so the next tick
// tries again.
func (e *Extender) failed(j job, fs []failure) {
	if len(fs) == 0 {
		return
	}
	var dropped []*lease
	var firstErr error
	live := 0
	e.mu.Lock()
	for _, f := range fs {
		l := f.l
		if l.gone.Load() || l.state == stateDropping {
			continue
		}
		live++
		if firstErr == nil {
			firstErr = f.err
		}
		if l.eo() && (j.receipt || f.perID) {
			l.state = stateDropping
			dropped = append(dropped, l)
			continue
		}
		l.state = stateIdle
	}
	e.mu.Unlock()
	if firstErr == nil {
		return
	}
	if j.receipt {
		e.drop(dropped)
		e.emit(event.Event{Kind: event.ReceiptModackFail, Subscription: j.sub, Count: live, Err: firstErr})
		e.log.Warn("lease: receipt modack failed", "subscription", j.sub, "count", live, "dropped", len(dropped), "err", firstErr)
		return
	}
	if len(dropped) > 0 {
		e.expire(dropped, firstErr)
	}
	if len(dropped) < live {
		e.log.Warn("lease: extension failed; the next tick retries", "subscription", j.sub, "count", live-len(dropped), "err", firstErr)
	}
}
