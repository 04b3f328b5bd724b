package source

import (
	"sync"
	"time"

	"github.com/pubsubflow/pubsubflow/stage"
)

// drain is the graceful end Stop begins (Config.DrainTimeout), the one a
// Subscriber's shutdown waits on too: once it is over, every run still
// going is abandoned. It ends when the timeout passes or at Close.
type drain struct {
	// mu is held while the runs are abandoned, so that whoever ends the
	// drain (the timer, or Close) returns only once their nacks are queued,
	// before Close flushes the acks.
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

// abandon ends r past the drain: its pipeline is cancelled first, so its
// stages take nothing more, and then what it was handed and has not
// settled is nacked.
func (r *run) abandon(g *stage.Group) {
	g.Cancel()
	if n := r.stranded(); n > 0 {
		r.s.log.Warn("pubsubflow/source: a run outlived the drain (DrainTimeout after Stop, or Close); what it held unsettled was nacked",
			"subscription", r.s.cfg.Subscription, "drain_timeout", r.s.cfg.DrainTimeout, "nacked", n)
	}
}

// Drained returns a channel closed once the drain Stop began is over (its
// DrainTimeout has passed, or Close was called): every run still going
// then was abandoned, its pipeline cancelled and what it held nacked.
func (s *Source) Drained() <-chan struct{} { return s.drain.done }
