package publisher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pubsubflow/pubsubflow/flow"
)

// flowQueue is the wait queue in front of a flow.FlowControl, which counts
// the published, unsettled messages and bytes (and admits a message larger
// than the byte limit when nothing else is outstanding). Blocked Publish
// calls wait in FIFO order, so a large message is not starved by a stream
// of small ones and one goroutine's publishes keep their order.
type flowQueue struct {
	fc       *flow.FlowControl
	failFast bool

	mu      sync.Mutex
	waiters []*flowWaiter // FIFO; only the head may be granted
	closed  bool
	queued  atomic.Int32 // len(waiters), for tryAcquire without mu
}

type flowWaiter struct {
	size  int
	ready chan struct{} // closed when granted or failed
	err   error         // set before ready is closed when not granted
}

func newFlowQueue(c FlowConfig) *flowQueue {
	return &flowQueue{fc: flow.NewFlowControl(int64(c.MaxMessages), int64(c.MaxBytes)), failFast: c.FailFast}
}

// tryAcquire takes a permit for one message of size bytes if one is free
// now and no Publish waits for one (they go first), without taking q.mu:
// the Publisher's fast path, which has checked under its own lock that it
// is not closed. It reports whether it took the permit.
//
// A waiter that queues concurrently is not overtaken unfairly: this call
// read the queue empty before the waiter was in it, and the waiter is
// granted by the next release, which grants under q.mu.
func (q *flowQueue) tryAcquire(size int) bool {
	return q.queued.Load() == 0 && q.fc.TryAcquire(size)
}

// acquire takes a permit for one message of size bytes, waiting for room
// unless failFast.
func (q *flowQueue) acquire(ctx context.Context, size int) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if len(q.waiters) == 0 && q.fc.TryAcquire(size) {
		q.mu.Unlock()
		return nil
	}
	if q.failFast {
		q.mu.Unlock()
		return fmt.Errorf("%w: %d messages / %d bytes outstanding (limits %d / %d), message of %d bytes",
			ErrFlowControlled, q.fc.Outstanding(), q.fc.OutstandingBytes(), q.fc.MaxMessages(), q.fc.MaxBytes(), size)
	}
	w := &flowWaiter{size: size, ready: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	q.queued.Store(int32(len(q.waiters)))
	q.mu.Unlock()

	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	select {
	case <-w.ready: // granted (or closed) meanwhile
		q.mu.Unlock()
		if w.err == nil {
			q.release(1, size)
		}
	default:
		for i, x := range q.waiters {
			if x == w {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				q.queued.Store(int32(len(q.waiters)))
				break
			}
		}
		q.grantLocked() // the head may have changed
		q.mu.Unlock()
	}
	return fmt.Errorf("publisher: waiting for flow control: %w", ctx.Err())
}

// release returns the permits of n messages totalling bytes and admits
// the waiters that now fit. The counts drop before q.mu is taken, so an
// acquire that found no room under q.mu and queued is granted here.
func (q *flowQueue) release(n, bytes int) {
	q.fc.ReleaseN(n, bytes)
	q.mu.Lock()
	q.grantLocked()
	q.mu.Unlock()
}

func (q *flowQueue) grantLocked() {
	for len(q.waiters) > 0 && q.fc.TryAcquire(q.waiters[0].size) {
		w := q.waiters[0]
		q.waiters[0] = nil
		q.waiters = q.waiters[1:]
		q.queued.Store(int32(len(q.waiters)))
		close(w.ready)
	}
}

// close fails every waiter and every later acquire with ErrClosed.
func (q *flowQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, w := range q.waiters {
		w.err = ErrClosed
		close(w.ready)
	}
	q.waiters = nil
	q.queued.Store(0)
}

// outstanding returns the messages and bytes held now.
func (q *flowQueue) outstanding() (msgs, bytes int) {
	return int(q.fc.Outstanding()), int(q.fc.OutstandingBytes())
}
