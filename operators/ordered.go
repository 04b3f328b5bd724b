package operators

import (
	"context"

	"github.com/pubsubflow/pubsubflow/stage"
)

// slot is one place in the ordered reorder window.
type slot[R any] struct {
	done chan struct{} // receives one signal when r is set
	r    R
	emit bool
	err  error
}

type job[T, R any] struct {
	v T
	s *slot[R]
}

// ordered dispatches elements to n workers, each into the next slot of a
// ring of window+1 slots, and emits slots in order. The FIFO of pending
// slots bounds the window; the extra slot keeps a slot from being reused
// while the emitter still waits on it.
func (pm *parallelMap[T, R]) ordered(g *stage.Group, in <-chan T) <-chan R {
	window := pm.opt.Window
	if window <= 0 {
		window = 2 * pm.n
	}
	slots := make([]slot[R], window+1)
	for i := range slots {
		slots[i].done = make(chan struct{}, 1)
	}
	jobs := make(chan job[T, R])
	pending := make(chan *slot[R], window)
	out := make(chan R)

	inner := stage.NewGroup(g.Context())
	inner.Go(func(ctx context.Context) error { // dispatcher
		defer close(jobs)
		defer close(pending)
		for i := 0; ; i = (i + 1) % len(slots) {
			v, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			s := &slots[i]
			select {
			case pending <- s:
			case <-ctx.Done():
				return nil
			}
			select {
			case jobs <- job[T, R]{v, s}:
			case <-ctx.Done():
				return nil
			}
		}
	})
	for range pm.n {
		inner.Go(func(ctx context.Context) error {
			for j := range jobs {
				j.s.r, j.s.emit, j.s.err = pm.call(ctx, j.v)
				j.s.done <- struct{}{}
			}
			return nil
		})
	}
	inner.Go(func(ctx context.Context) error { // emitter
		for s := range pending {
			select {
			case <-s.done:
			case <-ctx.Done():
				return nil
			}
			r, emit, err := s.r, s.emit, s.err
			var zero R
			s.r = zero
			if err != nil {
				return err
			}
			if emit && !stage.Send(ctx, out, r) {
				return nil
			}
		}
		return nil
	})
	closeAfter(g, inner, out)
	return out
}
