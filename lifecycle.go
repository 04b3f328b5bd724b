package pubsubflow

import (
	"context"
	"sync"
)

// lifecycle is a Subscriber's one state — open, then draining, then
// closed — and the runs (Run calls, Source pipelines) that hold it open.
// A run joins only while it is open, under the same lock that starts the
// drain, so no run starts after Close began and none is missed by it.
type lifecycle struct {
	mu       sync.Mutex
	state    lifeState
	runs     int
	idle     chan struct{} // closed once no run is left, after the drain began
	doneDone bool

	closingCh chan struct{} // closed when the drain begins
	// abandoned is done once the drain timeout has passed: the runs that
	// are left are stopped, their pipelines' leftovers nacked.
	abandoned context.Context
	abandon   context.CancelFunc
	done      chan struct{} // closed when shutdown has finished
	err       error         // shutdown's result, written before done closes
}

type lifeState int

const (
	open lifeState = iota
	draining
	closed
)

func newLifecycle() *lifecycle {
	l := &lifecycle{closingCh: make(chan struct{}), done: make(chan struct{})}
	l.abandoned, l.abandon = context.WithCancel(context.Background())
	return l
}

// join adds a run if the subscriber is open.
func (l *lifecycle) join() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != open {
		return false
	}
	l.runs++
	return true
}

// leave ends a run.
func (l *lifecycle) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs--
	if l.runs == 0 && l.idle != nil && !l.doneDone {
		close(l.idle)
		l.doneDone = true
	}
}

// begin starts the drain; false if it had begun already. It returns the
// channel closed once no run is left.
func (l *lifecycle) begin() (idle <-chan struct{}, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != open {
		return l.idle, false
	}
	l.state = draining
	close(l.closingCh)
	l.idle = make(chan struct{})
	if l.runs == 0 {
		close(l.idle)
		l.doneDone = true
	}
	return l.idle, true
}

// finish records shutdown's result.
func (l *lifecycle) finish(err error) {
	l.mu.Lock()
	l.state = closed
	l.err = err
	l.mu.Unlock()
	close(l.done)
}

// closing reports whether the drain has begun.
func (l *lifecycle) closing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state != open
}

// draining is closing, for the hot path: one channel poll, no lock.
func (l *lifecycle) draining() bool {
	select {
	case <-l.closingCh:
		return true
	default:
		return false
	}
}
