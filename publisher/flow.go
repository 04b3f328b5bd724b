package publisher

import (
	"context"
	"fmt"
	"sync"
)

// flowController counts published, unsettled messages and bytes. Blocked
// Publish calls wait in FIFO order, so a large message is not starved by
// a stream of small ones and one goroutine's publishes keep their order.
type flowController struct {
	maxMsgs, maxBytes int
	failFast          bool

	mu      sync.Mutex
	msgs    int
	bytes   int
	waiters []*flowWaiter // FIFO; only the head may be granted
	closed  bool
}

type flowWaiter struct {
	size  int
	ready chan struct{} // closed when granted or failed
	err   error         // set before ready is closed when not granted
}

func newFlowController(c FlowConfig) *flowController {
	return &flowController{maxMsgs: c.MaxMessages, maxBytes: c.MaxBytes, failFast: c.FailFast}
}

// fitsLocked reports whether one more message of size fits. A message
// larger than the byte limit fits only when nothing is outstanding.
func (f *flowController) fitsLocked(size int) bool {
	if f.msgs == 0 {
		return true
	}
	return f.msgs < f.maxMsgs && f.bytes+size <= f.maxBytes
}

// acquire takes a permit for one message of size bytes, waiting for room
// unless failFast.
func (f *flowController) acquire(ctx context.Context, size int) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	if len(f.waiters) == 0 && f.fitsLocked(size) {
		f.msgs++
		f.bytes += size
		f.mu.Unlock()
		return nil
	}
	if f.failFast {
		msgs, bytes := f.msgs, f.bytes
		f.mu.Unlock()
		return fmt.Errorf("%w: %d messages / %d bytes outstanding (limits %d / %d), message of %d bytes",
			ErrFlowControlled, msgs, bytes, f.maxMsgs, f.maxBytes, size)
	}
	w := &flowWaiter{size: size, ready: make(chan struct{})}
	f.waiters = append(f.waiters, w)
	f.mu.Unlock()

	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-w.ready: // granted (or closed) meanwhile
		if w.err == nil {
			f.releaseLocked(1, size)
		}
	default:
		for i, x := range f.waiters {
			if x == w {
				f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
				break
			}
		}
		f.grantLocked() // the head may have changed
	}
	return fmt.Errorf("publisher: waiting for flow control: %w", ctx.Err())
}

// release returns the permits of n messages totalling bytes.
func (f *flowController) release(n, bytes int) {
	f.mu.Lock()
	f.releaseLocked(n, bytes)
	f.mu.Unlock()
}

func (f *flowController) releaseLocked(n, bytes int) {
	f.msgs -= n
	f.bytes -= bytes
	f.grantLocked()
}

func (f *flowController) grantLocked() {
	for len(f.waiters) > 0 && f.fitsLocked(f.waiters[0].size) {
		w := f.waiters[0]
		f.waiters[0] = nil
		f.waiters = f.waiters[1:]
		f.msgs++
		f.bytes += w.size
		close(w.ready)
	}
}

// close fails every waiter and every later acquire with ErrClosed.
func (f *flowController) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, w := range f.waiters {
		w.err = ErrClosed
		close(w.ready)
	}
	f.waiters = nil
}

// outstanding returns the messages and bytes held now.
func (f *flowController) outstanding() (msgs, bytes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msgs, f.bytes
}
