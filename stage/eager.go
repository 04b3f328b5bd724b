package stage

import (
	"context"

	"github.com/pubsubflow/pubsubflow/internal/ring"
)

// DefaultBound is the buffer bound of an Eager stage that sets none. It
// matches the 1000 outstanding messages of the Pub/Sub clients' defaults.
const DefaultBound = 1000

// Eager is the eager-pull bounded-buffer stage. Its goroutine receives from
// upstream whenever it may hold more, runs OnReceive for each element at
// once, buffers it, and emits on downstream demand. While it cannot hold more
// it does not receive, so backpressure reaches upstream.
//
// All hooks run on the stage's goroutine, one at a time, and must not block
// for long: they are the "tracking" clock, which must never wait for the
// "processing" clock.
type Eager[T any] struct {
	// Bound is the most elements the stage holds (buffered plus one waiting
	// for admission). Zero means DefaultBound.
	Bound int

	// Room, if set, must also report true for the stage to receive. It lets
	// an external budget (flow control) stop reception. When it turns false,
	// the stage waits on Wake before asking again.
	Room func() bool

	// Admit, if set, takes a permit for a received element. When it returns
	// false the element waits, the stage stops receiving, and Admit is asked
	// again after Wake fires.
	Admit func(v T) bool

	// Wake returns a channel that is closed or signalled when Room or Admit
	// may have changed its answer. Required when Room or Admit is set.
	Wake func() <-chan struct{}

	// OnReceive runs on receipt, after admission, before buffering. An
	// error ends the stage and fails the group; the element is then dropped.
	OnReceive func(ctx context.Context, v T) error

	// OnDrop receives every element the stage still holds when it stops
	// without emitting it (cancellation, Discard), so its owner can release
	// it (for a Pub/Sub message: nack). Nil means drop silently.
	OnDrop func(v T)

	// Discard, if set, is closed by the owner to stop the stage emitting:
	// from then on it drops what it holds and what it receives, and closes
	// its output when upstream closes. It is how a graceful shutdown nacks
	// messages that were not yet handed to processing.
	Discard <-chan struct{}

	// Ready, if set, gates emission of the oldest buffered element: it
	// returns nil when v may be emitted now, or a channel that is closed
	// when Ready should be asked again. Exactly-once tracking uses it to
	// hand a message on only after its receipt modack was confirmed.
	Ready func(v T) <-chan struct{}

	// Skip, if set, is asked before emitting the oldest element; true
	// removes it without emitting (for example a message whose lease
	// already ended while it waited in the buffer).
	Skip func(v T) bool

	// Observe, if set, is called with the buffered count after every change,
	// on the stage's goroutine (for gauges and tests).
	Observe func(buffered int)
}

// Run starts the stage's goroutine under g and returns its output.
func (e *Eager[T]) Run(g *Group, in <-chan T) <-chan T {
	out := make(chan T)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		return e.loop(ctx, in, out)
	})
	return out
}

func (e *Eager[T]) bound() int {
	if e.Bound > 0 {
		return e.Bound
	}
	return DefaultBound
}

func (e *Eager[T]) loop(ctx context.Context, in <-chan T, out chan<- T) error {
	bound := e.bound()
	buf := ring.New[T](min(bound, 1024))
	var (
		pending    T
		hasPending bool
		discarding bool
		discard    = e.Discard
	)
	drop := func(v T) {
		if e.OnDrop != nil {
			e.OnDrop(v)
		}
	}
	dropAll := func() {
		if hasPending {
			drop(pending)
			hasPending = false
		}
		for buf.Len() > 0 {
			drop(buf.Pop())
		}
		e.observe(0)
	}
	defer dropAll()

	for {
		// Admit a waiting element first: it is the oldest received.
		if hasPending && (e.Admit == nil || e.Admit(pending)) {
			hasPending = false
			if err := e.receive(ctx, pending, buf); err != nil {
				return err
			}
		}
		if in == nil && buf.Len() == 0 && !hasPending {
			return nil
		}

		var (
			recv <-chan T
			send chan<- T
			wake <-chan struct{}
			head T
		)
		if in != nil && discarding {
			recv = in
		} else if in != nil && !hasPending && buf.Len() < bound {
			if e.Room == nil || e.Room() {
				recv = in
			} else {
				wake = e.Wake()
			}
		}
		if hasPending {
			wake = e.Wake()
		}
		var ready <-chan struct{}
		if buf.Len() > 0 && !discarding {
			head = buf.Front()
			if e.Skip != nil && e.Skip(head) {
				buf.Pop()
				e.observe(buf.Len())
				continue
			}
			if e.Ready != nil {
				ready = e.Ready(head)
			}
			if ready == nil {
				send = out
			}
		}

		select {
		case v, ok := <-recv:
			if !ok {
				in = nil
				continue
			}
			if discarding {
				drop(v)
				continue
			}
			if e.Admit != nil && !e.Admit(v) {
				pending, hasPending = v, true
				continue
			}
			if err := e.receive(ctx, v, buf); err != nil {
				return err
			}
		case send <- head:
			buf.Pop()
			e.observe(buf.Len())
		case <-wake:
		case <-ready:
		case <-discard:
			discard, discarding = nil, true
			dropAll()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// receive runs the on-receipt hook and buffers v.
func (e *Eager[T]) receive(ctx context.Context, v T, buf *ring.Ring[T]) error {
	if e.OnReceive != nil {
		if err := e.OnReceive(ctx, v); err != nil {
			if e.OnDrop != nil {
				e.OnDrop(v)
			}
			return err
		}
	}
	buf.Push(v)
	e.observe(buf.Len())
	return nil
}

func (e *Eager[T]) observe(n int) {
	if e.Observe != nil {
		e.Observe(n)
	}
}
