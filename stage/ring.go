package stage

// Ring is a FIFO queue in a circular slice. It grows by doubling up to the
// bound its owner enforces and never shrinks, so a stage in steady state
// pushes and pops without allocating.
type Ring[T any] struct {
	buf  []T
	head int
	n    int
}

// NewRing returns a ring with room for capacity elements before it grows.
func NewRing[T any](capacity int) *Ring[T] {
	if capacity < 1 {
		capacity = 1
	}
	return &Ring[T]{buf: make([]T, capacity)}
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

func (r *Ring[T]) grow() {
	nb := make([]T, 2*len(r.buf))
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}
