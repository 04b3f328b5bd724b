package operators

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/stage"
)

// Batched input and output of an Unordered ParallelMap (stage.BatchFlow).
// The workers share the batches that arrive: a worker that receives one
// keeps its first element and queues the rest, waking idle workers, so a
// batch of a hundred slow elements is spread over all the workers while a
// batch of fast ones costs one channel operation. Each worker collects its
// results and hands them on as a batch when it has nothing queued to do,
// when the batch is full, or when its oldest result has waited flushAfter.

const (
	// maxOutBatch bounds the results a worker holds before handing them on.
	maxOutBatch = 256
	// flushAfter bounds how long a result waits in a worker for more.
	flushAfter = 5 * time.Millisecond
)

// unorderedFlow is an Unordered ParallelMap: a stage.Flow and a
// stage.BatchFlow.
type unorderedFlow[T, R any] struct{ pm *parallelMap[T, R] }

// The batch path is what makes an unordered ParallelMap cheap.
var _ stage.BatchFlow[int, int] = unorderedFlow[int, int]{}

func (u unorderedFlow[T, R]) Run(g *stage.Group, in <-chan T) <-chan R { return u.pm.unordered(g, in) }

func (u unorderedFlow[T, R]) RunBatches(g *stage.Group, in <-chan []T) <-chan []R {
	pm := u.pm
	out := make(chan []R)
	q := &shared[T]{in: in, wake: make(chan struct{}, pm.n)}
	workers := stage.NewGroup(g.Context())
	sp := newSpawner(workers, pm.n, func(ctx context.Context, sp *spawner) error {
		return pm.batchWorker(ctx, sp, q, out)
	})
	q.started = &sp.started
	sp.start()
	closeAfter(g, workers, out)
	return out
}

// batchWorker takes elements from q until the input ends, handing its
// results on in batches.
func (pm *parallelMap[T, R]) batchWorker(ctx context.Context, sp *spawner, q *shared[T], out chan<- []R) error {
	w := worker[R]{out: out}
	for {
		v, ok := q.take(ctx, w.pending() == 0)
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			if w.pending() > 0 { // nothing ready now: hand on what is done
				if !w.flush(ctx) {
					return nil
				}
				continue
			}
			return nil // the input ended
		}
		sp.busy()
		r, emit, err := pm.call(ctx, v)
		if err != nil {
			return err
		}
		if emit {
			w.add(r)
		}
		if w.full() && !w.flush(ctx) {
			return nil
		}
		sp.ready()
	}
}

// worker holds one worker's results until they are handed on.
type worker[R any] struct {
	out   chan<- []R
	batch []R
	first time.Time // when the oldest result was added
}

func (w *worker[R]) pending() int { return len(w.batch) }

func (w *worker[R]) add(r R) {
	if len(w.batch) == 0 {
		w.first = time.Now()
	}
	w.batch = append(w.batch, r)
}

func (w *worker[R]) full() bool {
	return len(w.batch) >= maxOutBatch || len(w.batch) > 0 && time.Since(w.first) >= flushAfter
}

// flush hands on the batch; false when ctx ended first (it is dropped: the
// group is cancelled).
func (w *worker[R]) flush(ctx context.Context) bool {
	if len(w.batch) == 0 {
		return true
	}
	b := w.batch
	w.batch = nil
	return stage.Send(ctx, w.out, b)
}

// shared is the queue of elements the workers share.
type shared[T any] struct {
	in   <-chan []T
	wake chan struct{} // tokens for idle workers (cap n): work was queued, or the end came

	mu        sync.Mutex // never held while waiting
	queue     []T
	head      int
	closed    bool // the input ended
	receivers int  // workers that may be holding a batch not yet queued

	started *atomic.Int64 // workers started: how many a wake for all wakes
}

// take returns the next element: a queued one, else one from the next
// batch (queuing the rest). With block false it does not wait for a batch:
// ok false then means nothing is ready now. With block true, ok false
// means the input ended and everything was taken, or ctx is done.
func (q *shared[T]) take(ctx context.Context, block bool) (v T, ok bool) {
	for {
		q.mu.Lock()
		if v, ok = q.popLocked(); ok {
			q.mu.Unlock()
			return v, true
		}
		if q.closed && q.receivers == 0 {
			q.mu.Unlock()
			return v, false // ended: nothing queued, nobody holds a batch
		}
		var in <-chan []T
		if !q.closed {
			in = q.in
			q.receivers++
		}
		q.mu.Unlock()
		if !block {
			select {
			case b, open := <-in:
				if v, ok = q.arrived(b, open); ok {
					return v, true
				}
				continue
			default:
				q.done(in != nil)
				return v, false
			}
		}
		select {
		case b, open := <-in:
			if v, ok = q.arrived(b, open); ok {
				return v, true
			}
		case <-q.wake:
			q.done(in != nil)
		case <-ctx.Done():
			q.done(in != nil)
			return v, false
		}
	}
}

// arrived takes the first element of a batch just received and queues the
// rest, waking idle workers for them; !open records the end of the input.
func (q *shared[T]) arrived(b []T, open bool) (v T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.receivers--
	if !open {
		q.closed = true
		q.wakeLocked(q.workers()) // every idle worker looks again
		return v, false
	}
	if len(b) == 0 {
		if q.closed && q.receivers == 0 {
			q.wakeLocked(q.workers())
		}
		return v, false
	}
	q.queue = append(q.queue, b[1:]...)
	if q.closed && q.receivers == 0 {
		q.wakeLocked(q.workers()) // the last batch: idle workers may end
	} else {
		q.wakeLocked(len(b) - 1)
	}
	return b[0], true
}

// done is the end of a wait that received no batch.
func (q *shared[T]) done(receiving bool) {
	if !receiving {
		return
	}
	q.mu.Lock()
	q.receivers--
	if q.closed && q.receivers == 0 {
		q.wakeLocked(q.workers()) // the last one out: the others may end
	}
	q.mu.Unlock()
}

// workers is how many workers may be waiting for a wake: the ones
// started, not the n that may be.
func (q *shared[T]) workers() int {
	if q.started == nil {
		return cap(q.wake)
	}
	return int(q.started.Load())
}

// wakeLocked hands out up to n wake tokens without waiting.
func (q *shared[T]) wakeLocked(n int) {
	for range min(n, cap(q.wake)) {
		select {
		case q.wake <- struct{}{}:
		default:
			return
		}
	}
}

func (q *shared[T]) popLocked() (v T, ok bool) {
	if q.head == len(q.queue) {
		return v, false
	}
	v = q.queue[q.head]
	var zero T
	q.queue[q.head] = zero
	q.head++
	if q.head == len(q.queue) {
		q.queue, q.head = q.queue[:0], 0
	}
	return v, true
}
