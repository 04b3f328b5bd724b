package source

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/stage"
)

// run is one Run (or RunBatches) of a source: its streams, its hand-off
// and the messages it handed on.
type run struct {
	s  *Source
	id uint64
}

func (s *Source) newRun() *run { return &run{s: s, id: s.runs.Add(1)} }

// runBatches starts r's streams and pump under g. When the run's pipeline
// is over (g is done) it settles what it handed on and its pipeline left
// unsettled.
func (s *Source) runBatches(g *stage.Group, r *run) <-chan []*Message {
	out := make(chan []*Message)
	if s.stopped() {
		g.Fail(ErrClosed)
		close(out)
		return out
	}
	// The streams stop with the pipeline, or when the source stops.
	sctx, cancel := context.WithCancel(g.Context())
	unhook := context.AfterFunc(s.stopCtx, cancel)
	h := newHandoff()
	var wg sync.WaitGroup
	streamsDone := make(chan struct{})
	for i := range s.cfg.Streams {
		wg.Add(1)
		g.Go(func(context.Context) error {
			defer wg.Done()
			return s.runStream(sctx, i, h)
		})
	}
	g.Go(func(context.Context) error {
		wg.Wait()
		unhook()
		cancel()
		close(streamsDone)
		return nil
	})
	g.Go(func(ctx context.Context) error {
		defer close(out)
		s.pump(sctx, r, h, out, streamsDone)
		return nil
	})
	for _, st := range s.steps {
		if st.Failed != nil {
			g.Go(func(context.Context) error { return watchStep(sctx, st) })
		}
	}
	s.drain.join(r, g)
	g.OnDone(func() {
		s.drain.leave(r)
		r.stranded()
	})
	return out
}

// watchStep returns st's Err once st has failed while the run's streams
// run (ctx), and nil once they have stopped first.
func watchStep(ctx context.Context, st Receipt) error {
	select {
	case <-st.Failed():
		if ctx.Err() == nil {
			return st.Err()
		}
	case <-ctx.Done():
	}
	return nil
}

// stranded nacks what the run handed on and its pipeline left unsettled
// (dropped by one of its stages, or in flight when it was cancelled), so
// the server redelivers it at once rather than when its lease runs out. A
// stage still working on such a message finds its outcome taken:
// cancelling a pipeline abandons its work. It returns how many it nacked.
func (r *run) stranded() (n int) {
	r.s.held.each(func(m *Message) {
		if m.st.Owner() == r.id {
			m.Nack()
			n++
		}
	})
	return n
}

// unsent settles what the run received but will not hand on: with the
// steps' Unsent if one has it (a Subscriber's shutdown outcome), else a
// nack, so the server redelivers it at once.
func (r *run) unsent(ms []*Message) {
	if len(ms) == 0 {
		return
	}
	for _, st := range r.s.steps {
		if st.Unsent != nil {
			st.Unsent(ms)
		}
	}
	for _, m := range ms {
		m.Nack()
	}
}

// receipt decodes a response's messages and makes them the source's:
// each is bound to the settle path and recorded as held, and the steps
// run on them, on the stream's goroutine, before any of them is queued.
// deadline is the stream's ack deadline the server is sure to apply.
func (s *Source) receipt(lane int, rms []*pubsubpb.ReceivedMessage, deadline time.Duration) []*Message {
	now := time.Now()
	ms := decodeResponse(rms, s.cfg.Subscription, s.props.Load(), now, deadline, &s.path, s.clock)
	s.c.received.Add(uint64(len(ms)))
	for _, m := range ms {
		m.st.Acks = s.acks // its lease extensions go where its acks go
		if m.DeliveryAttempt > 1 {
			s.c.redelivered.Add(1)
		}
	}
	s.emit(event.Event{Kind: event.Received, Count: len(ms)})
	if !s.held.add(ms) { // closed meanwhile
		for _, m := range ms {
			m.st.EndReceipt(m)
			m.Nack()
		}
		return nil
	}
	if s.trace != nil {
		s.trace.received(ms)
	}
	for _, st := range s.steps {
		st.Receive(lane, ms)
	}
	// What the steps attached joins each message's hold list now, before
	// the batch leaves this goroutine.
	for _, m := range ms {
		m.st.EndReceipt(m)
	}
	// The next response's messages get the deadline their leases use.
	if d := s.leaseDeadline(); d > 0 && d != s.StreamAckDeadline() {
		s.setStreamAckDeadline(d)
	}
	return ms
}

// leaseDeadline is the deadline the first step with leases uses (0: none).
func (s *Source) leaseDeadline() time.Duration {
	for _, st := range s.steps {
		if st.AckDeadline != nil {
			return st.AckDeadline()
		}
	}
	return 0
}

// Stop ends the streams of every run, now and to come: each run hands on
// nothing more, nacks what it had received but not handed on (after a
// fused step's Unsent has seen it) and closes its output, so a pipeline
// downstream finishes what it holds and ends. That drain lasts at most
// Config.DrainTimeout: then each run still going is abandoned, its
// pipeline cancelled and what it was handed and left unsettled nacked
// (Drained is closed then). Stop returns at once, so a stage may call it.
// Stop is for a graceful end (a Subscriber drains with it); Close after
// the pipelines have ended.
func (s *Source) Stop() {
	s.stopFn()
	s.drain.start(s.cfg.DrainTimeout)
}

func (c *core) stopped() bool { return c.stopCtx.Err() != nil }
