package source

import (
	"context"
	"slices"
	"sync"
	"time"
)

// handoff is the queue between the streams and the consumer: streams push
// each response after its receipt and read on; one pump hands on all that
// is queued as one batch. What the streams may read bounds it (a Budget's
// room, or one response per stream).
type handoff struct {
	mu      sync.Mutex
	batches [][]*Message
	n       int           // messages queued
	ready   chan struct{} // cap 1: something was queued
	taken   chan struct{} // closed and replaced when the queue empties
}

func newHandoff() *handoff {
	return &handoff{ready: make(chan struct{}, 1), taken: make(chan struct{})}
}

func (h *handoff) push(b []*Message) {
	h.mu.Lock()
	h.batches = append(h.batches, b)
	h.n += len(b)
	h.mu.Unlock()
	select {
	case h.ready <- struct{}{}:
	default:
	}
}

// take removes everything queued, as one batch.
func (h *handoff) take() []*Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b []*Message
	if len(h.batches) == 1 {
		b = h.batches[0]
	} else if len(h.batches) > 1 {
		b = slices.Concat(h.batches...)
	}
	clear(h.batches)
	h.batches, h.n = h.batches[:0], 0
	return b
}

// emptied wakes the streams waiting in drained.
func (h *handoff) emptied() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		close(h.taken)
		h.taken = make(chan struct{})
	}
}

// drained returns nil when nothing is queued, else a channel closed at the
// next hand-off that empties the queue.
func (h *handoff) drained() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return nil
	}
	return h.taken
}

// pump hands on what the streams queue until they have all stopped; what
// is left, or could not be handed on, is unsent. Each message handed on is
// marked as the run's (run.stranded).
func (s *Source) pump(ctx context.Context, r *run, h *handoff, out chan<- []*Message, streamsDone <-chan struct{}) {
	for {
		select {
		case <-h.ready:
		case <-streamsDone:
			r.unsent(h.take())
			return
		case <-ctx.Done():
			<-streamsDone // cancelled with ctx: they stop at once
			r.unsent(h.take())
			return
		}
		b := h.take()
		if !s.waitReady(ctx, b) {
			r.unsent(b)
			continue // ctx is done: the next pass finishes
		}
		expired := s.expiries.Wait() // before the check: no expiry after it is missed
		b = s.dropSettled(b)
		for _, st := range s.steps {
			if st.HandOff != nil {
				b = st.HandOff(ctx, b)
			}
		}
		if len(b) > 0 {
			for _, m := range b {
				m.st.SetOwner(r.id)
			}
			s.send(ctx, r, out, b, expired)
		}
		h.emptied()
	}
}

// send hands b on. While downstream does not take it, at the earliest
// lapse, or at an expiry elsewhere (expired, fetched before b was last
// checked), the settled are dropped and the rest offered again, so no
// copy the server may have given out again is handed on.
func (s *Source) send(ctx context.Context, r *run, out chan<- []*Message, b []*Message, expired <-chan struct{}) {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for len(b) > 0 {
		var lapse <-chan time.Time
		if d := earliestLapse(b); !d.IsZero() {
			wait := time.Until(d) - handOffSlack
			if t == nil {
				t = time.NewTimer(wait)
			} else {
				t.Reset(wait)
			}
			lapse = t.C
		}
		select {
		case out <- b:
			return
		case <-ctx.Done():
			r.unsent(b)
			return
		case <-lapse:
		case <-expired:
		}
		expired = s.expiries.Wait()
		b = s.dropSettled(b)
	}
}

// handOffSlack is how early the hand-off checks for a lapse, so that a
// copy is not handed on as it lapses.
const handOffSlack = time.Millisecond

// earliestLapse is the earliest lapse in b (zero if no deadline is known).
func earliestLapse(b []*Message) time.Time {
	var first time.Time
	for _, m := range b {
		if d := m.st.LapseAt(); !d.IsZero() && (first.IsZero() || d.Before(first)) {
			first = d
		}
	}
	return first
}

// dropSettled removes the messages settled while queued, expiring the
// lapsed first.
func (s *Source) dropSettled(b []*Message) []*Message {
	keep := b[:0]
	now := time.Now().Add(handOffSlack)
	for _, m := range b {
		if !m.st.ExpireIfLate(m, now) {
			keep = append(keep, m)
		}
	}
	clear(b[len(keep):])
	return keep
}

// waitReady waits until every message of b is Ready, or ctx is done.
func (s *Source) waitReady(ctx context.Context, b []*Message) bool {
	for _, st := range s.steps {
		if st.Ready == nil {
			continue
		}
		for _, m := range b {
			if ch := st.Ready(m); ch != nil {
				select {
				case <-ch:
				case <-ctx.Done():
					return false
				}
			}
		}
	}
	return true
}
