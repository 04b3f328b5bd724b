package operators

import (
	"context"

	"github.com/pubsubflow/pubsubflow/internal/ring"
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
	type keyed struct {
		key string
		v   T
	}
	jobs := make(chan keyed)
	free := make(chan string)
	out := make(chan R)

	inner := stage.NewGroup(g.Context())
	inner.Go(func(ctx context.Context) error { // coordinator
		defer close(jobs)
		waiting := map[string]*ring.Ring[T]{}   // present = key busy
		ready := ring.New[keyed](min(pm.n, 16)) // grows as keys get ready
		queued, running := 0, 0
		for in != nil || running > 0 || ready.Len() > 0 {
			var recv <-chan T
			if in != nil && queued < window {
				recv = in
			}
			var send chan<- keyed
			var head keyed
			if ready.Len() > 0 {
				send, head = jobs, ready.Front()
			}
			select {
			case v, ok := <-recv:
				if !ok {
					in = nil
					continue
				}
				k := pm.opt.Key(v)
				if q, busy := waiting[k]; busy {
					q.Push(v)
					queued++
					continue
				}
				waiting[k] = ring.New[T](1)
				ready.Push(keyed{k, v})
			case send <- head:
				ready.Pop()
				running++
			case k := <-free:
				running--
				q := waiting[k]
				if q.Len() == 0 {
					delete(waiting, k)
					continue
				}
				queued--
				ready.Push(keyed{k, q.Pop()})
			case <-ctx.Done():
				return nil
			}
		}
		return nil
	})
	newSpawner(inner, pm.n, func(ctx context.Context, sp *spawner) error {
		for j := range jobs {
			sp.busy()
			if ok, err := pm.apply(ctx, j.v, out); !ok {
				return err
			}
			select {
			case free <- j.key:
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
