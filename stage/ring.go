package stage

import "iter"

// Ring is a FIFO queue (with PushFront, a double-ended one) in a circular
// slice: the module's one, shared by the stages, the operators, the
// Publisher and pubsubtest. It grows by doubling and never shrinks, so a
// queue in steady state pushes and pops without allocating; an owner that
// needs a bound enforces it itself. The zero value is an empty queue.
type Ring[T any] struct {
	buf  []T
	head int
	n    int
}

// NewRing returns a ring with room for capacity elements before it grows.
func NewRing[T any](capacity int) *Ring[T] {
	return &Ring[T]{buf: make([]T, max(capacity, 1))}
}

// Len is the number of queued elements.
func (r *Ring[T]) Len() int { return r.n }

// Push appends v at the back.
func (r *Ring[T]) Push(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

// PushFront puts v at the front, to be popped next.
func (r *Ring[T]) PushFront(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1 + len(r.buf)) % len(r.buf)
	r.buf[r.head] = v
	r.n++
}

// Front returns the oldest element. It must not be called on an empty ring.
func (r *Ring[T]) Front() T { return r.buf[r.head] }

// Pop removes and returns the oldest element. It must not be called on an
// empty ring.
func (r *Ring[T]) Pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // let the element be collected
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}

// All yields the queued elements, oldest first, without removing them. The
// ring must not change during the iteration.
func (r *Ring[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for i := 0; i < r.n; i++ {
			if !yield(r.buf[(r.head+i)%len(r.buf)]) {
				return
			}
		}
	}
}

// grow doubles the room (a zero ring starts with 16), keeping the order.
func (r *Ring[T]) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	nb := make([]T, size)
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}
