package publisher

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// flowCount counts the published, unsettled messages and bytes against
// their limits. A message larger than the byte limit is admitted only when
// no bytes are outstanding, so it cannot wait forever.
type flowCount struct {
	maxMsgs, maxBytes int64

	mu          sync.Mutex // serializes admissions; releases only subtract
	msgs, bytes atomic.Int64
}

// tryAcquire counts one message of size bytes if the limits allow it now,
// and reports whether it did.
func (c *flowCount) tryAcquire(size int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, b := c.msgs.Load(), c.bytes.Load()
	if n >= c.maxMsgs || (b > 0 && b+int64(size) > c.maxBytes) {
		return false
	}
	c.msgs.Add(1)
	c.bytes.Add(int64(size))
	return true
}

// release uncounts n messages totalling bytes.
func (c *flowCount) release(n, bytes int) {
	c.bytes.Add(-int64(bytes))
	c.msgs.Add(-int64(n))
}

// flowQueue is the wait queue in front of a flowCount. Blocked Publish
// calls wait in FIFO order, so a large message is not starved by a stream
// of small ones and one goroutine's publishes keep their order.
type flowQueue struct {
	fc       flowCount
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
	return &flowQueue{fc: flowCount{maxMsgs: flowLimit(c.MaxMessages), maxBytes: flowLimit(c.MaxBytes)}, failFast: c.FailFast}
}

// flowLimit is a FlowConfig limit as flowCount reads it: Unlimited is a
// limit never reached.
func flowLimit(v int) int64 {
	if v == Unlimited {
		return math.MaxInt64
	}
	return int64(v)
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
	return q.queued.Load() == 0 && q.fc.tryAcquire(size)
}

// acquire takes a permit for one message of size bytes, waiting for room
// unless failFast.
func (q *flowQueue) acquire(ctx context.Context, size int) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if len(q.waiters) == 0 && q.fc.tryAcquire(size) {
		q.mu.Unlock()
		return nil
	}
	if q.failFast {
		q.mu.Unlock()
		return fmt.Errorf("%w: %d messages / %d bytes outstanding (limits %d / %d), message of %d bytes",
			ErrFlowControlled, q.fc.msgs.Load(), q.fc.bytes.Load(), q.fc.maxMsgs, q.fc.maxBytes, size)
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
	q.fc.release(n, bytes)
	q.mu.Lock()
	q.grantLocked()
	q.mu.Unlock()
}

func (q *flowQueue) grantLocked() {
	for len(q.waiters) > 0 && q.fc.tryAcquire(q.waiters[0].size) {
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
	return int(q.fc.msgs.Load()), int(q.fc.bytes.Load())
}
