package operators

import (
	"context"
	"sync"

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

// ordered dispatches elements to workers started lazily (spawner), each
// into a slot, and emits slots in order. The FIFO of pending slots bounds
// the window. Slots are made as the window fills and reused from a free
// list once emitted, so a large n or Window costs memory only for the
// elements actually held.
func (pm *parallelMap[T, R]) ordered(g *stage.Group, in <-chan T) <-chan R {
	window := pm.opt.Window
	if window <= 0 {
		window = min(2*pm.n, MaxWindow)
	}
	jobs := make(chan job[T, R])
	pending := make(chan *slot[R], window)
	out := make(chan R)
	fl := &freeList[R]{}

	inner := stage.NewGroup(g.Context())
	inner.Go(func(ctx context.Context) error { // dispatcher
		defer close(jobs)
		defer close(pending)
		for {
			v, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			s := fl.get()
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
	newSpawner(inner, pm.n, func(ctx context.Context, sp *spawner) error {
		for j := range jobs {
			sp.busy()
			j.s.r, j.s.emit, j.s.err = pm.call(ctx, j.v)
			j.s.done <- struct{}{}
			sp.ready()
		}
		return nil
	}).start()
	inner.Go(func(ctx context.Context) error { return pm.emitOrdered(ctx, pending, out, fl) })
	closeAfter(g, inner, out)
	return out
}

// emitOrdered emits the pending slots' results in order, returning each
// slot to fl once read.
func (pm *parallelMap[T, R]) emitOrdered(ctx context.Context, pending <-chan *slot[R], out chan<- R, fl *freeList[R]) error {
	for s := range pending {
		select {
		case <-s.done:
		case <-ctx.Done():
			return nil
		}
		r, emit, err := s.r, s.emit, s.err
		var zero R
		s.r, s.err = zero, nil
		fl.put(s)
		if err != nil {
			return err
		}
		if emit && !stage.Send(ctx, out, r) {
			return nil
		}
	}
	return nil
}

// freeList holds emitted slots for reuse. It never holds more slots than
// the window had in use at once, since a slot is made only when none is
// free.
type freeList[R any] struct {
	mu    sync.Mutex
	slots []*slot[R]
}

func (f *freeList[R]) get() *slot[R] {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.slots); n > 0 {
		s := f.slots[n-1]
		f.slots = f.slots[:n-1]
		return s
	}
	return &slot[R]{done: make(chan struct{}, 1)}
}

func (f *freeList[R]) put(s *slot[R]) {
	f.mu.Lock()
	f.slots = append(f.slots, s)
	f.mu.Unlock()
}
