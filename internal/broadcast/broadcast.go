// Package broadcast is the module's one wake-up broadcast: waiters fetch
// a channel that the next Broadcast closes. The flow budget (a release)
// and the source's hand-offs (an expiry) both wake their waiters with it.
package broadcast

import "sync/atomic"

// Wake is a broadcast. The zero value is ready; a Broadcast nobody waits
// for costs one atomic load. To wait without missing one, fetch Wait
// first, then check the condition, then wait on the channel.
type Wake struct{ ch atomic.Pointer[chan struct{}] }

// Wait returns the channel the next Broadcast closes.
func (w *Wake) Wait() <-chan struct{} {
	for {
		if p := w.ch.Load(); p != nil {
			return *p
		}
		c := make(chan struct{})
		if w.ch.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// Broadcast closes the channel the waiters hold.
func (w *Wake) Broadcast() {
	if w.ch.Load() == nil {
		return
	}
	if p := w.ch.Swap(nil); p != nil {
		close(*p)
	}
}
