package stage

import (
	"context"
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

// eagerRun is one run of an Eager stage: the state its loop's phases
// (admit, arm, receive, discard) share, kept here rather than passed around.
type eagerRun[T any] struct {
	e          *Eager[T]
	buf        *Ring[T]
	bound      int
	in         <-chan T // nil once upstream closed
	discard    <-chan struct{}
	pending    T // received but refused by Admit
	hasPending bool
	discarding bool
}

// eagerArms are what one round of the loop waits on: nil channels are
// disabled arms, and head is what send would emit.
type eagerArms[T any] struct {
	recv  <-chan T
	send  chan<- T
	wake  <-chan struct{}
	ready <-chan struct{}
	head  T
}

func (e *Eager[T]) loop(ctx context.Context, in <-chan T, out chan<- T) error {
	bound := e.bound()
	r := &eagerRun[T]{e: e, buf: NewRing[T](min(bound, 1024)), bound: bound, in: in, discard: e.Discard}
	defer r.dropAll()
	for {
		// Admit a waiting element first: it is the oldest received.
		if r.hasPending && (e.Admit == nil || e.Admit(r.pending)) {
			r.hasPending = false
			if err := e.receive(ctx, r.pending, r.buf); err != nil {
				return err
			}
		}
		if r.in == nil && r.buf.Len() == 0 && !r.hasPending {
			return nil
		}
		a, skipped := r.arm(out)
		if skipped {
			continue
		}
		select {
		case v, ok := <-a.recv:
			if err := r.received(ctx, v, ok); err != nil {
				return err
			}
		case a.send <- a.head:
			r.buf.Pop()
			e.observe(r.buf.Len())
		case <-a.wake:
		case <-a.ready:
		case <-r.discard:
			r.discard, r.discarding = nil, true
			r.dropAll()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// arm decides what this round waits on: receiving while there is room (or
// always while discarding, to drop), Wake while Room or Admit said no, and
// sending the head once Ready allows. skipped reports that Skip removed the
// head instead, so the round starts over.
func (r *eagerRun[T]) arm(out chan<- T) (a eagerArms[T], skipped bool) {
	e := r.e
	if r.in != nil && r.discarding {
		a.recv = r.in
	} else if r.in != nil && !r.hasPending && r.buf.Len() < r.bound {
		if e.Room == nil || e.Room() {
			a.recv = r.in
		} else {
			a.wake = e.Wake()
		}
	}
	if r.hasPending {
		a.wake = e.Wake()
	}
	if r.buf.Len() > 0 && !r.discarding {
		a.head = r.buf.Front()
		if e.Skip != nil && e.Skip(a.head) {
			r.buf.Pop()
			e.observe(r.buf.Len())
			return a, true
		}
		if e.Ready != nil {
			a.ready = e.Ready(a.head)
		}
		if a.ready == nil {
			a.send = out
		}
	}
	return a, false
}

// received handles what the receive arm got: a closed input stops
// reception; an element is dropped while discarding, waits as pending when
// Admit refuses it, and is received and buffered otherwise.
func (r *eagerRun[T]) received(ctx context.Context, v T, ok bool) error {
	switch {
	case !ok:
		r.in = nil
	case r.discarding:
		r.e.drop(v)
	case r.e.Admit != nil && !r.e.Admit(v):
		r.pending, r.hasPending = v, true
	default:
		return r.e.receive(ctx, v, r.buf)
	}
	return nil
}

// dropAll hands everything the run holds to OnDrop: on stopping, and when
// Discard turns on.
func (r *eagerRun[T]) dropAll() {
	if r.hasPending {
		r.e.drop(r.pending)
		r.hasPending = false
	}
	for r.buf.Len() > 0 {
		r.e.drop(r.buf.Pop())
	}
	r.e.observe(0)
}

// receive runs the on-receipt hook and buffers v.
func (e *Eager[T]) receive(ctx context.Context, v T, buf *Ring[T]) error {
	if e.OnReceive != nil {
		if err := e.OnReceive(ctx, v); err != nil {
			e.drop(v)
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

// drop releases an element the stage will not emit (OnDrop, if set).
func (e *Eager[T]) drop(v T) {
	if e.OnDrop != nil {
		e.OnDrop(v)
	}
}
