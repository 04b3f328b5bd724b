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

// runBatches starts r's streams and pump under g; once g is done it
// nacks what the run handed on and its pipeline left unsettled.
func (s *Source) runBatches(g *stage.Group, r *run) <-chan []*Message {
	out := make(chan []*Message)
	if s.stopped() {
		g.Fail(ErrClosed)
		close(out)
		return out
	}
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
// (dropped, or in flight when it was cancelled), so the server redelivers
// it at once; it returns how many it nacked.
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

// receipt decodes a response's messages, records them as held and runs
// the steps on them, before any of them is queued. deadline is the stream
// ack deadline the server is sure to apply.
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
// nothing more, nacks what it received but did not hand on (after the
// steps' Unsent) and closes its output, so its pipeline finishes what it
// holds. After Config.DrainTimeout each run still going is abandoned: its
// pipeline is cancelled and what it left unsettled nacked (Drained is
// closed then). Stop returns at once, so a stage may call it.
func (s *Source) Stop() {
	s.stopFn()
	s.drain.start(s.cfg.DrainTimeout)
}

func (c *core) stopped() bool { return c.stopCtx.Err() != nil }

// drain is the graceful end Stop begins: once it is over (DrainTimeout
// later, or at Close), every run still going is abandoned.
type drain struct {
	// mu is held while the runs are abandoned, so that whoever ends the
	// drain returns only once their nacks are queued.
	mu    sync.Mutex
	runs  map[*run]*stage.Group // the runs going, with their pipelines
	over  bool
	timer *time.Timer
	done  chan struct{} // closed once over
}

func newDrain() *drain {
	return &drain{runs: make(map[*run]*stage.Group), done: make(chan struct{})}
}

// start ends the drain after timeout; a drain started or over already is
// left as it is.
func (d *drain) start(timeout time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer == nil && !d.over {
		d.timer = time.AfterFunc(timeout, d.end)
	}
}

// join counts r, running under g, until leave; a run that joins once the
// drain is over is abandoned at once.
func (d *drain) join(r *run, g *stage.Group) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.over {
		r.abandon(g)
		return
	}
	d.runs[r] = g
}

func (d *drain) leave(r *run) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.runs, r)
}

// end abandons the runs still going (once).
func (d *drain) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.over {
		return
	}
	d.over = true
	if d.timer != nil {
		d.timer.Stop()
	}
	for r, g := range d.runs {
		r.abandon(g)
	}
	clear(d.runs)
	close(d.done)
}

// abandon cancels r's pipeline, so its stages take nothing more, and then
// nacks what it left unsettled.
func (r *run) abandon(g *stage.Group) {
	g.Cancel()
	if n := r.stranded(); n > 0 {
		r.s.log.Warn("pubsubflow/source: a run outlived the drain (DrainTimeout after Stop, or Close); what it held unsettled was nacked",
			"subscription", r.s.cfg.Subscription, "drain_timeout", r.s.cfg.DrainTimeout, "nacked", n)
	}
}

// Drained returns a channel closed once the drain Stop began is over (its
// DrainTimeout has passed, or Close was called) and every run still going
// then was abandoned.
func (s *Source) Drained() <-chan struct{} { return s.drain.done }
