package source

import (
	"context"
	"sync"

	"github.com/pubsubflow/pubsubflow/internal/message"
)

// handoff is the queue between the streams and the consumer. Streams push
// each decoded response (already through the receipt steps) and go back to
// reading; one pump goroutine hands on everything queued as one batch. Its
// size is bounded by what the streams may read: the Budget's room, or,
// without a Budget, one response per stream (reads on demand).
type handoff struct {
	mu      sync.Mutex
	batches [][]*message.Message
	n       int           // messages queued
	ready   chan struct{} // cap 1: something was queued
	taken   chan struct{} // closed and replaced when the queue empties
}

func newHandoff() *handoff {
	return &handoff{ready: make(chan struct{}, 1), taken: make(chan struct{})}
}

func (h *handoff) push(b []*message.Message) {
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
func (h *handoff) take() []*message.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b []*message.Message
	switch len(h.batches) {
	case 0:
	case 1:
		b = h.batches[0]
	default:
		b = make([]*message.Message, 0, h.n)
		for _, x := range h.batches {
			b = append(b, x...)
		}
	}
	clear(h.batches)
	h.batches, h.n = h.batches[:0], 0
	return b
}

// emptied wakes the streams waiting in drained: what they read was handed on.
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
// is then still queued, or could not be handed on, goes to Unsent.
func (s *Source) pump(ctx context.Context, h *handoff, out chan<- []*message.Message, streamsDone <-chan struct{}) {
	for {
		select {
		case <-h.ready:
		case <-streamsDone:
			s.unsent(h.take())
			return
		case <-ctx.Done():
			<-streamsDone // cancelled with ctx: they stop at once
			s.unsent(h.take())
			return
		}
		b := h.take()
		if !s.waitReady(ctx, b) {
			s.unsent(b)
			continue // ctx is done: the next pass finishes
		}
		if s.cfg.HandOff != nil {
			b = s.cfg.HandOff(ctx, b)
		}
		if len(b) > 0 {
			select {
			case out <- b:
			case <-ctx.Done():
				s.unsent(b)
			}
		}
		h.emptied()
	}
}

// waitReady waits until every message of b is Ready, or ctx is done.
func (s *Source) waitReady(ctx context.Context, b []*message.Message) bool {
	if s.cfg.Ready == nil {
		return true
	}
	for _, m := range b {
		if ch := s.cfg.Ready(m); ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return false
			}
		}
	}
	return true
}
