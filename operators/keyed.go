package operators

import (
	"context"

	"github.com/pubsubflow/pubsubflow/stage"
)

// keyed runs a coordinator and up to n workers, started as keys are in
// flight (spawner). The coordinator receives
// elements while fewer than window wait behind busy keys, hands an element
// to the workers only when no other element of its key is running, and
// queues it behind its key otherwise. A worker emits the result before it
// reports the key free, so per-key output order is input order.
func (pm *parallelMap[T, R]) keyed(g *stage.Group, in <-chan T) <-chan R {
	window := pm.opt.Window
	if window <= 0 {
		window = 1000
	}
	c := &keyedCoord[T]{
		key:     pm.opt.Key,
		window:  window,
		in:      in,
		jobs:    make(chan keyedJob[T]),
		free:    make(chan string),
		waiting: map[string]*stage.Ring[T]{},
		ready:   stage.NewRing[keyedJob[T]](min(pm.n, 16)),
	}
	out := make(chan R)

	inner := stage.NewGroup(g.Context())
	inner.Go(c.run)
	newSpawner(inner, pm.n, func(ctx context.Context, sp *spawner) error {
		for j := range c.jobs {
			sp.busy()
			if ok, err := pm.apply(ctx, j.v, out); !ok {
				return err
			}
			select {
			case c.free <- j.key:
			case <-ctx.Done():
				return nil
			}
			sp.ready()
		}
		return nil
	}).start()
	closeAfter(g, inner, out)
	return out
}

// keyedJob is an element handed to the workers, with its key so that the
// worker can report the key free.
type keyedJob[T any] struct {
	key string
	v   T
}

// keyedCoord is the Keyed mode's coordinator, owned by its goroutine: it
// knows which keys are busy and what waits behind each, so that at most
// one element per key runs at a time.
type keyedCoord[T any] struct {
	key     func(T) string
	window  int      // most elements queued behind busy keys
	in      <-chan T // nil once upstream closed
	jobs    chan keyedJob[T]
	free    chan string               // a worker reports its job's key done
	waiting map[string]*stage.Ring[T] // present = key busy
	ready   *stage.Ring[keyedJob[T]]  // grows as keys get ready
	queued  int                       // elements in waiting's rings
	running int                       // jobs handed to the workers
}

// run is the coordinator's loop: it receives while the window has room,
// hands ready jobs to the workers, and takes keys back as they are freed,
// until the input ended and every job has run.
func (c *keyedCoord[T]) run(ctx context.Context) error {
	defer close(c.jobs)
	for c.in != nil || c.running > 0 || c.ready.Len() > 0 {
		var recv <-chan T
		if c.in != nil && c.queued < c.window {
			recv = c.in
		}
		var send chan<- keyedJob[T]
		var head keyedJob[T]
		if c.ready.Len() > 0 {
			send, head = c.jobs, c.ready.Front()
		}
		select {
		case v, ok := <-recv:
			if !ok {
				c.in = nil
				continue
			}
			c.receive(v)
		case send <- head:
			c.ready.Pop()
			c.running++
		case k := <-c.free:
			c.freed(k)
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// receive queues v behind its key when the key is busy, and otherwise
// marks the key busy and makes v ready to run.
func (c *keyedCoord[T]) receive(v T) {
	k := c.key(v)
	if q, busy := c.waiting[k]; busy {
		q.Push(v)
		c.queued++
		return
	}
	c.waiting[k] = stage.NewRing[T](1)
	c.ready.Push(keyedJob[T]{k, v})
}

// freed takes key k back from a worker: its next queued element becomes
// ready, or, with none queued, the key is no longer busy.
func (c *keyedCoord[T]) freed(k string) {
	c.running--
	q := c.waiting[k]
	if q.Len() == 0 {
		delete(c.waiting, k)
		return
	}
	c.queued--
	c.ready.Push(keyedJob[T]{k, q.Pop()})
}
