package operators

import (
	"context"
	"sync/atomic"

	"github.com/pubsubflow/pubsubflow/stage"
)

// spawner starts a ParallelMap's workers lazily: one at first, and one
// more only when a worker takes an element and no other is left waiting
// for one, up to n. So ParallelMap(1e6) over a thousand elements runs no
// more goroutines than it has elements in flight, plus one waiting.
// Workers do not exit when idle: a steady load keeps its workers, with no
// goroutine start per element.
type spawner struct {
	g       *stage.Group
	n       int64
	work    func(ctx context.Context) error
	started atomic.Int64
	idle    atomic.Int64 // workers started and waiting for an element
}

func newSpawner(g *stage.Group, n int, work func(ctx context.Context, s *spawner) error) *spawner {
	s := &spawner{g: g, n: int64(n)}
	s.work = func(ctx context.Context) error { return work(ctx, s) }
	return s
}

// start starts the first worker.
func (s *spawner) start() {
	s.started.Store(1)
	s.idle.Store(1)
	s.g.Go(s.work)
}

// busy is called by a worker that took an element: if it was the last one
// waiting, another is started to wait in its place.
func (s *spawner) busy() {
	if s.started.Load() >= s.n || s.idle.Add(-1) > 0 {
		return // all started: idle is never read again, so not kept
	}
	if s.started.Add(1) > s.n {
		s.started.Add(-1) // another worker started the last one
		return
	}
	s.idle.Add(1)
	s.g.Go(s.work)
}

// ready is called by a worker that goes back to waiting for an element.
// Once all n are started it does nothing: a shared counter written per
// element would cost a busy map its cache line.
func (s *spawner) ready() {
	if s.started.Load() < s.n {
		s.idle.Add(1)
	}
}
