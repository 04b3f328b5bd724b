package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// sampleEvery is how often a run samples the consumer's state, for the
// progress display, the peak and the plot.
const sampleEvery = 100 * time.Millisecond

// runResult is what one consumer run did.
type runResult struct {
	name     string
	messages int
	wall     time.Duration
	timedOut bool
	gaveUp   bool // the naive run was stopped at its time limit, as expected
	err      error

	handled, duplicates int64 // distinct messages handled; copies handled again
	peakOutstanding     int64
	server              *pubsubtest.SubStats // nil on a real subscription
	processing, ack     percentiles
	samples             []snapshot
}

// redelivered is the server's count when known, otherwise the copies the
// handler saw again.
func (r *runResult) redelivered() int64 {
	if r.server != nil {
		return r.server.Redelivered
	}
	return r.duplicates
}

// acked is the server's ack count when known, otherwise the distinct
// messages handled (each was acked).
func (r *runResult) acked() int64 {
	if r.server != nil {
		return r.server.Acked
	}
	return r.handled
}

// throughput is messages acked per second of wall time.
func (r *runResult) throughput() float64 {
	if r.wall <= 0 {
		return 0
	}
	return float64(r.acked()) / r.wall.Seconds()
}

// drive runs c until every one of n messages was acked (by the server's
// count on the embedded server, by distinct messages handled otherwise),
// sampling its state for prog, then stops it.
func drive(ctx context.Context, name string, c consumer, m *meter, srv *pubsubtest.Server, sub string, n int, timeout time.Duration, prog progress) runResult {
	r := runResult{name: name, messages: n}
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	start := time.Now()
	sample := func() (snapshot, bool) {
		s := snapshot{at: time.Since(start)}
		s.outstanding, s.buffered, s.processing = c.state()
		handled, dups := m.counts()
		s.acked, s.redelivered, s.expired = handled, dups, c.expired()
		done := handled >= int64(n)
		if srv != nil {
			st := srv.SubscriptionStats(sub)
			s.acked, s.redelivered, s.expired, s.serverOutstanding = st.Acked, st.Redelivered, st.Expired, st.Outstanding
			done = st.Acked >= int64(n) && st.Outstanding == 0 && st.Backlog == 0
		}
		r.peakOutstanding = max(r.peakOutstanding, s.outstanding)
		r.samples = append(r.samples, s)
		return s, done
	}

	if err := c.start(ctx); err != nil {
		r.err = err
		return r
	}
	var last snapshot
loop:
	for {
		select {
		case <-tick.C:
			var done bool
			last, done = sample()
			prog.update(last)
			if done {
				break loop
			}
		case <-deadline.C:
			r.timedOut = true
			r.err = fmt.Errorf("%s: not every message was acked within %v", name, timeout)
			break loop
		case <-ctx.Done():
			r.err = ctx.Err()
			break loop
		}
	}
	r.wall = time.Since(start)
	prog.finish(last)
	if err := c.stop(); err != nil && !errors.Is(err, context.Canceled) {
		r.err = errors.Join(r.err, fmt.Errorf("%s: stopping: %w", name, err))
	}
	r.handled, r.duplicates = m.counts()
	r.processing, r.ack = m.latencies()
	if srv != nil {
		st := srv.SubscriptionStats(sub)
		r.server = &st
	}
	return r
}
