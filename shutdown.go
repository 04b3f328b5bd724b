package pubsubflow

import (
	"context"
	"errors"
	"sync"
	"time"
)

// shutdownSlack is how far past the deadline each of a shutdown's last
// waits may run, so a flush started at the deadline still gets a moment.
const shutdownSlack = 300 * time.Millisecond

// Close is Shutdown bounded by the drain timeout; a second Close returns
// the first result. From a handler, call Shutdown with its ctx instead.
func (s *Subscriber) Close() error { return s.Shutdown(context.Background()) }

// Shutdown stops the streams, settles what is not yet processing with
// OnShutdown, waits up to the drain timeout (or ctx) for the runs, nacks
// what is left, flushes the acks, stops lease extension, and returns once
// every goroutine it started has exited. Called with a handler's ctx, it
// starts the shutdown and returns nil at once.
func (s *Subscriber) Shutdown(ctx context.Context) error {
	if from, _ := ctx.Value(handlerKey{}).(*Subscriber); from == s {
		go func() { _ = s.shutdown(context.WithoutCancel(ctx), true) }()
		return nil
	}
	return s.shutdown(ctx, true)
}

// shutdown runs the shutdown once; later callers wait for it. drain false
// skips waiting for the runs (Run's pipeline has already ended).
func (s *Subscriber) shutdown(ctx context.Context, drain bool) error {
	idle, first := s.life.begin()
	if !first {
		select {
		case <-s.life.done:
			return s.life.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.src.Stop() // the drain is the source's; ctx only ends it earlier
	end := time.Now().Add(s.cfg.DrainTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end = d
	}
	if drain {
		select {
		case <-idle:
		case <-s.src.Drained():
		case <-ctx.Done():
		}
	}
	// Give the cancelled runs a moment, so what their workers settle on
	// the way out still reaches the acknowledger.
	s.life.abandon()
	grace := time.NewTimer(min(stuckGrace, time.Until(end)+shutdownSlack))
	select {
	case <-idle:
	case <-grace.C:
	}
	grace.Stop()
	// What the flush cannot send by then fails, counted in AckFailures.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(time.Until(end), 0)+shutdownSlack)
	defer cancel()
	errs := []error{s.src.Close(fctx), s.ext.Close()}
	if s.tracing != nil {
		s.tracing.close()
	}
	s.closeParts(false)
	err := errors.Join(errs...)
	s.life.finish(err)
	return err
}

// closeParts releases what NewSubscriber made, on a failed one (partly
// built) what it started too.
func (s *Subscriber) closeParts(failed bool) {
	s.disown()
	if failed {
		if s.src != nil {
			_ = s.src.Close(context.Background())
		}
		if s.ext != nil {
			_ = s.ext.Close()
		}
	}
	if s.tel != nil {
		s.tel.close()
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
}

// lifecycle is a Subscriber's state (open, draining, closed) and the runs
// that hold it open. A run joins under the lock that starts the drain, so
// none starts after Close began and none is missed by it.
type lifecycle struct {
	mu    sync.Mutex
	state lifeState
	runs  int
	idle  chan struct{} // closed once the drain began and no run is left

	closingCh chan struct{}   // closed when the drain begins
	abandoned context.Context // done past the drain timeout: the runs left are stopped
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
	l := &lifecycle{idle: make(chan struct{}), closingCh: make(chan struct{}), done: make(chan struct{})}
	l.abandoned, l.abandon = context.WithCancel(context.Background())
	return l
}

func (l *lifecycle) join() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != open {
		return false
	}
	l.runs++
	return true
}

func (l *lifecycle) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs--
	if l.runs == 0 && l.state == draining {
		close(l.idle)
	}
}

// begin starts the drain; first is false if it had begun already.
func (l *lifecycle) begin() (idle <-chan struct{}, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != open {
		return l.idle, false
	}
	l.state = draining
	close(l.closingCh)
	if l.runs == 0 {
		close(l.idle)
	}
	return l.idle, true
}

func (l *lifecycle) finish(err error) {
	l.mu.Lock()
	l.state = closed
	l.err = err
	l.mu.Unlock()
	close(l.done)
}

// draining reports whether the drain has begun: one channel poll, no lock.
func (l *lifecycle) draining() bool {
	select {
	case <-l.closingCh:
		return true
	default:
		return false
	}
}
