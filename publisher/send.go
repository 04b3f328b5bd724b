package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/retry"
)

// sendLoop sends ready batches until none waits. It takes only sendMu
// (and mu after a batch of an ordering key): a batch leaves live, for
// Flush, only once its Results have settled.
func (p *Publisher) sendLoop() {
	defer p.wg.Done()
	var sent *batch
	for {
		p.sendMu.Lock()
		if sent != nil {
			delete(p.live, sent)
		}
		if p.ready.Len() == 0 {
			p.senders--
			p.sendMu.Unlock()
			return
		}
		b := p.ready.Pop()
		p.sendMu.Unlock()
		var span trace.Span
		if b.spans != nil {
			span = p.tracing.startPublish(b)
		}
		ids, msgErrs, err := p.publish(b, span)
		if span != nil {
			p.tracing.endPublish(span, b, ids, msgErrs, err)
		}
		p.complete(b, ids, msgErrs, err)
		sent = b
	}
}

// publish sends one batch. When the request cannot be encoded, the
// messages at fault fail on their own (msgErrs) and the rest are sent, so a
// bad message never fails the others of its batch.
func (p *Publisher) publish(b *batch, span trace.Span) (ids []string, msgErrs []error, err error) {
	hedge := p.hedges != nil && !b.ordered
	ids, err = p.send(b.msgs, hedge, span)
	if err == nil || !isEncodingError(err) {
		return ids, nil, err
	}
	msgErrs = make([]error, len(b.msgs))
	var good []*pubsubpb.PubsubMessage
	var at []int
	for i, m := range b.msgs {
		if _, merr := proto.Marshal(m); merr != nil {
			e := invalid(m.GetOrderingKey(), "message %d of a batch of %d: encoding: cannot be encoded (modified after Publish?)", i, len(b.msgs))
			e.Err = merr
			msgErrs[i] = e
			continue
		}
		good = append(good, m)
		at = append(at, i)
	}
	if len(good) == len(b.msgs) {
		return nil, nil, err // no single message is at fault
	}
	ids = make([]string, len(b.msgs))
	if len(good) > 0 {
		gids, gerr := p.send(good, hedge, span)
		for j, i := range at {
			if gerr != nil {
				msgErrs[i] = gerr
			} else {
				ids[i] = gids[j]
			}
		}
	}
	return ids, msgErrs, nil
}

// send publishes msgs within the retry deadline: one retrying attempt,
// or, when hedge is set, hedged attempts (sendHedged).
func (p *Publisher) send(msgs []*pubsubpb.PubsubMessage, hedge bool, span trace.Span) ([]string, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.RetryDeadline)
	defer cancel()
	req := &pubsubpb.PublishRequest{Topic: p.topic, Messages: msgs}
	if hedge {
		return p.sendHedged(ctx, span, func(ctx context.Context) ([]string, error) { return p.attempt(ctx, req) })
	}
	return p.attempt(ctx, req)
}

// attempt publishes req, retrying the failures Config.Retryable calls
// transient with the library's backoff (internal/retry) until ctx's
// deadline. A request the client cannot encode is not retried.
func (p *Publisher) attempt(ctx context.Context, req *pubsubpb.PublishRequest) ([]string, error) {
	msgs := req.Messages
	backoff := retry.Backoff(p.cfg.BackoffMin, p.cfg.BackoffMax)
	for attempt := 1; ; attempt++ {
		resp, err := p.client.Publish(ctx, req, publishCodec)
		if err == nil {
			if n := len(resp.GetMessageIds()); n != len(msgs) {
				return nil, fmt.Errorf("publisher: publish to %s: the server returned %d ids for %d messages", p.topic, n, len(msgs))
			}
			return resp.MessageIds, nil
		}
		fail := func(err error) error {
			return fmt.Errorf("publisher: publish %d messages to %s (attempt %d): %w", len(msgs), p.topic, attempt, err)
		}
		if ctx.Err() != nil || isEncodingError(err) || !p.cfg.Retryable(err) {
			return nil, fail(err)
		}
		// Give up when the pause would pass the deadline.
		d := backoff.Pause()
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return nil, fail(err)
		}
		p.stats.retries.Add(1)
		p.cfg.Logger.Debug("publisher: retrying publish", "topic", p.topic, "messages", len(msgs), "attempt", attempt, "delay", d, "err", err)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fail(errors.Join(err, ctx.Err()))
		}
	}
}

// complete settles b and what it decides for its key: the next batch of
// the key becomes ready, or, on failure, the key pauses and its queued
// batches fail. msgErrs, when set, holds the failures of single messages
// (the others were published); for an ordering key the first of them
// pauses the key, since the messages behind it would be out of order.
// Only a batch of an ordering key takes mu. The caller drops b from live
// afterwards.
func (p *Publisher) complete(b *batch, ids []string, msgErrs []error, err error) {
	// b is no longer shared: no Publish adds to a sealed batch, and its
	// Results read these fields only once done is closed.
	b.ids, b.msgErrs = ids, msgErrs
	if msgErrs == nil {
		b.err = err
	} else if err == nil && b.ordered {
		err = firstErr(msgErrs) // pauses the key below; b.msgErrs still decides each Result
	}
	b.dropWire(&p.slabs) // the ids are all a Result needs; let the data go
	var paused []*batch
	var perr *Error
	if b.ordered {
		paused, perr = p.settleKey(b.ks, err)
	}
	// Settle outside the locks: release flow control, count, then wake
	// Results (counted first, so Stats agrees with a Result just read).
	p.flow.release(b.n, b.flowBytes)
	p.count(b.n, msgErrs, err)
	close(b.done)
	if perr != nil {
		p.failPaused(paused, perr)
	}
}

// settleKey moves ks on once its batch in flight completed with err:
// a failure pauses the key and fails its queued and open batches (they
// are returned, with the pause's error, for failPaused to settle outside
// mu); else the key's next batch becomes ready, or the key, idle, is
// forgotten.
func (p *Publisher) settleKey(ks *keyState, err error) (paused []*batch, perr *Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil:
		perr = &Error{Kind: ErrPaused, OrderingKey: ks.key, Err: err}
		ks.paused = perr
		paused = append(paused, ks.queue...)
		ks.queue = nil
		if ks.open != nil {
			paused = append(paused, ks.open)
			p.closeLocked(ks.open)
		}
		ks.busy = false
		for _, q := range paused {
			q.err = perr
			q.dropWire(&p.slabs)
		}
	case len(ks.queue) > 0:
		next := ks.queue[0]
		ks.queue[0] = nil
		ks.queue = ks.queue[1:]
		p.sendMu.Lock()
		p.ready.Push(next)
		p.dispatchSendLocked()
		p.sendMu.Unlock()
	default:
		ks.busy = false
		if ks.idle() {
			delete(p.keys, ks.key)
		}
	}
	return paused, perr
}

// count adds a completed batch of n messages to Stats and logs its
// failures: the single messages of msgErrs when it is set (the others
// were published), else all n when err is set.
func (p *Publisher) count(n int, msgErrs []error, err error) {
	nfailed, msg, cause := 0, "publisher: messages could not be encoded", firstErr(msgErrs)
	for _, e := range msgErrs {
		if e != nil {
			nfailed++
		}
	}
	if msgErrs == nil && err != nil {
		nfailed, msg, cause = n, "publisher: publish failed", err
	}
	if n > nfailed {
		p.stats.published.Add(int64(n - nfailed))
		p.stats.batches.Add(1)
	}
	if nfailed > 0 {
		p.stats.failed.Add(int64(nfailed))
		p.cfg.Logger.Warn(msg, "topic", p.topic, "messages", nfailed, "err", cause)
	}
}

// failPaused settles the batches a paused key failed with perr, after
// the batch that paused it: their permits and counts, then their Results
// and spans, and last their place in live, so that Flush waits for them.
func (p *Publisher) failPaused(paused []*batch, perr *Error) {
	count := 0
	for _, q := range paused {
		count += q.n
		p.flow.release(q.n, q.flowBytes)
	}
	p.stats.failed.Add(int64(count))
	for _, q := range paused {
		close(q.done)
		if q.spans != nil {
			endCreates(q, nil, nil, perr)
		}
	}
	p.sendMu.Lock()
	for _, q := range paused {
		delete(p.live, q) // after its done closed, for Flush
	}
	p.sendMu.Unlock()
	p.cfg.Logger.Warn("publisher: ordering key paused", "topic", p.topic, "key", perr.OrderingKey, "failed_behind", count, "err", perr.Err)
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
