package publisher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/event"
)

// sendLoop sends ready batches until none waits.
func (p *Publisher) sendLoop() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if p.ready.Len() == 0 {
			p.senders--
			p.mu.Unlock()
			return
		}
		b := p.ready.Pop()
		p.mu.Unlock()
		var span trace.Span
		if b.spans != nil {
			span = p.tracing.startPublish(b)
		}
		ids, err := p.publish(b)
		if span != nil {
			p.tracing.endPublish(span, b, ids, err)
		}
		p.complete(b, ids, err)
	}
}

// publish sends one batch, retrying transient failures with backoff until
// the retry deadline.
func (p *Publisher) publish(b *batch) ([]string, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.RetryDeadline)
	defer cancel()
	req := &pubsubpb.PublishRequest{Topic: p.topic, Messages: b.msgs}
	backoff := p.cfg.BackoffMin
	for attempt := 1; ; attempt++ {
		resp, err := p.client.Publish(ctx, req)
		if err == nil {
			if n := len(resp.GetMessageIds()); n != len(b.msgs) {
				return nil, fmt.Errorf("publisher: publish to %s: the server returned %d ids for %d messages", p.topic, n, len(b.msgs))
			}
			return resp.MessageIds, nil
		}
		fail := func(err error) error {
			return fmt.Errorf("publisher: publish %d messages to %s (attempt %d): %w", len(b.msgs), p.topic, attempt, err)
		}
		if ctx.Err() != nil || !p.cfg.Retryable(err) {
			return nil, fail(err)
		}
		// Wait a random time in [backoff/2, backoff], doubling up to the max,
		// and give up when the wait would pass the deadline.
		d := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, p.cfg.BackoffMax)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return nil, fail(err)
		}
		p.stats.retries.Add(1)
		p.cfg.Events.Emit(event.Event{Kind: event.Retry, Count: len(b.msgs), Delay: d, Err: err})
		p.cfg.Logger.Debug("publisher: retrying publish", "topic", p.topic, "messages", len(b.msgs), "attempt", attempt, "delay", d, "err", err)
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
// batches fail.
func (p *Publisher) complete(b *batch, ids []string, err error) {
	var paused []*batch
	var perr *PausedError
	p.mu.Lock()
	b.ids, b.err = ids, err
	b.msgs = nil // the ids are all a Result needs; let the data go
	delete(p.live, b)
	if ks := b.ks; ks.ordered() {
		switch {
		case err != nil:
			perr = &PausedError{Key: ks.key, Cause: err}
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
				q.msgs = nil
				delete(p.live, q)
			}
		case len(ks.queue) > 0:
			next := ks.queue[0]
			ks.queue[0] = nil
			ks.queue = ks.queue[1:]
			p.ready.Push(next)
			p.dispatchLocked()
		default:
			ks.busy = false
			if ks.idle() {
				delete(p.keys, ks.key)
			}
		}
	}
	p.mu.Unlock()

	// Settle outside the lock: release flow control, then wake Results.
	n := b.n
	p.flow.release(n, b.flowBytes)
	close(b.done)
	if err == nil {
		p.stats.published.Add(int64(n))
		p.stats.batches.Add(1)
		p.cfg.Events.Emit(event.Event{Kind: EventPublished, Count: n})
	} else {
		p.stats.failed.Add(int64(n))
		p.cfg.Events.Emit(event.Event{Kind: EventPublishFailed, Count: n, Err: err})
		p.cfg.Logger.Warn("publisher: publish failed", "topic", p.topic, "messages", n, "err", err)
	}
	if perr != nil {
		count := 0
		for _, q := range paused {
			c := q.n
			count += c
			p.flow.release(c, q.flowBytes)
			close(q.done)
			if q.spans != nil {
				endCreates(q, nil, perr)
			}
		}
		p.stats.failed.Add(int64(count))
		p.cfg.Events.Emit(event.Event{Kind: EventPaused, Count: count, Err: perr})
		p.cfg.Logger.Warn("publisher: ordering key paused", "topic", p.topic, "key", perr.Key, "failed_behind", count, "err", err)
	}
}
