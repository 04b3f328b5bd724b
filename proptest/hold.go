package proptest

import (
	"context"
	"sync"
)

// hold stalls a handler until it is released. Its lock is never held
// while anyone waits: a waiter takes the channel and waits on it alone, so
// it is durably blocked inside a synctest bubble.
type hold struct {
	mu sync.Mutex
	ch chan struct{} // nil: not stalled
}

// stall makes handlers that start from now on wait.
func (h *hold) stall() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch == nil {
		h.ch = make(chan struct{})
	}
}

// release lets every waiting handler go on.
func (h *hold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch != nil {
		close(h.ch)
		h.ch = nil
	}
}

// wait blocks while the hold is stalled, or until ctx is done.
func (h *hold) wait(ctx context.Context) error {
	h.mu.Lock()
	ch := h.ch
	h.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
