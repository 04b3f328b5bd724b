package pipeline

import (
	"container/list"
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/stage"
)

// TypeError reports an element of the wrong type arriving from go-streams.
type TypeError struct {
	Want reflect.Type
	Got  any
}

// Error names the type that arrived and the one expected.
func (e *TypeError) Error() string {
	return fmt.Sprintf("pipeline: go-streams element of type %T, want %v", e.Got, e.Want)
}

// cast converts v to T or returns a *TypeError. It is the one place where
// this package looks inside an any.
func cast[T any](v any) (T, error) {
	t, ok := v.(T)
	if !ok {
		return t, &TypeError{Want: reflect.TypeFor[T](), Got: v}
	}
	return t, nil
}

// pumpOut copies a typed channel into a go-streams inlet channel and closes
// it when in closes or the group is cancelled, so that go-streams' own
// goroutines, which end only when their input closes, always end.
func pumpOut[T any](g *stage.Group, in <-chan T, inlet chan<- any) {
	g.Go(func(ctx context.Context) error {
		defer close(inlet)
		for {
			v, ok := stage.Recv(ctx, in)
			if !ok || !stage.Send[any](ctx, inlet, v) {
				return nil
			}
		}
	})
}

// pumpIn copies a go-streams outlet into a typed channel. A wrong type
// fails the group at once, so every other stage stops and settles what it
// holds. After that, or after cancellation, it keeps draining the outlet
// until it closes (handing elements to dropped), because a go-streams
// operator blocked on an unconditional send would otherwise leak its
// goroutine.
func pumpIn[T any](g *stage.Group, outlet <-chan any, out chan<- T, dropped func(any)) {
	g.Go(func(ctx context.Context) error {
		defer close(out)
		defer func() {
			for v := range outlet {
				discard(dropped, v)
			}
		}()
		for v := range outlet {
			t, err := cast[T](v)
			if err != nil {
				discard(dropped, v)
				g.Fail(err) // now: the drain above ends only once the graph does
				return err
			}
			if !stage.Send(ctx, out, t) {
				discard(dropped, v)
				return nil
			}
		}
		return nil
	})
}

// discard hands v to dropped, if set.
func discard(dropped func(any), v any) {
	if dropped != nil {
		dropped(v)
	}
}

// StreamsOptions configure Streams.
type StreamsOptions[In any] struct {
	// Dropped receives elements the adapter had to discard: of the wrong
	// type, or arriving after cancellation.
	Dropped func(v any)
	// Lost receives, when the sub-graph has closed, every element that went
	// in and never came out (filtered, or held by a window at shutdown),
	// and that Late did not get. Lost, Late and Watch apply only when In is
	// a pointer type and the sub-graph's output type is In (elements are
	// told apart by identity); a message pipeline uses them to settle what
	// a foreign operator dropped instead of letting it vanish.
	Lost func(v In)
	// Hold, with Late, bounds how long an element may stay inside: Late
	// receives, in one call per sweep, the elements that have been inside
	// for Hold, and they are forgotten (one that comes out later still
	// passes on). A sweep runs when the oldest element inside reaches Hold
	// and takes with it those that went in up to Hold/8 after it, so a
	// burst is handed over at once: each element between 7/8 Hold and Hold
	// after it went in. Zero: Late is never called.
	Hold time.Duration
	Late func(vs []In)
	// Watch, if set (with Hold), is called every Hold/2 while the
	// sub-graph runs, with the number of elements inside and the oldest of
	// them (the zero In when none is).
	Watch func(inside int, oldest In)
}

// Streams embeds a go-streams sub-graph as one flow of ours. build receives
// the group the flow runs in (for NewStreamsFlow adapters of our own stages
// inside the graph) and the input as a streams.Source, and returns the
// graph's outlet. An element of the wrong type ends the pipeline at once
// with a *TypeError: the other stages are cancelled.
func Streams[In, Out any](build func(g *stage.Group, in streams.Source) streams.Outlet, opt StreamsOptions[In]) stage.Flow[In, Out] {
	track := (opt.Lost != nil || opt.Late != nil || opt.Watch != nil) &&
		reflect.TypeFor[In]().Kind() == reflect.Pointer && reflect.TypeFor[In]() == reflect.TypeFor[Out]()
	return stage.FlowFunc[In, Out](func(g *stage.Group, in <-chan In) <-chan Out {
		var inside *tracker[In]
		if track {
			inside = newTracker(opt)
			in = tap(g, in, inside.enter)
			if opt.Hold > 0 && (opt.Late != nil || opt.Watch != nil) {
				g.Go(func(ctx context.Context) error { inside.sweep(ctx); return nil })
			}
		}
		src := &StreamsSource[In]{out: make(chan any)}
		pumpOut(g, in, src.out)
		outlet := build(g, src)
		out := make(chan Out)
		if !track {
			pumpIn(g, outlet.Out(), out, opt.Dropped)
			return out
		}
		mid := make(chan Out)
		pumpIn(g, outlet.Out(), mid, opt.Dropped)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			defer inside.close()
			for v := range mid {
				inside.leave(any(v).(In))
				select {
				case out <- v:
				case <-ctx.Done():
					inside.lost(any(v).(In)) // out of the graph, but not passed on
				}
			}
			return nil
		})
		return out
	})
}

// tracker records, by identity and in the order they went in, the
// elements inside a sub-graph. Entry, exit and the sweeps run on three
// goroutines, hence the mutex.
type tracker[T any] struct {
	opt StreamsOptions[T]

	mu     sync.Mutex
	inside map[any]*list.Element // of entry[T], in order
	order  list.List
	closed bool          // close ran: what enters now is lost at once
	done   chan struct{} // closed by close: the sweeps end
}

type entry[T any] struct {
	v  T
	at time.Time
}

func newTracker[T any](opt StreamsOptions[T]) *tracker[T] {
	return &tracker[T]{opt: opt, inside: map[any]*list.Element{}, done: make(chan struct{})}
}

// enter records v; after close (the graph has ended, v can never come
// out) it hands v to Lost instead.
func (t *tracker[T]) enter(v T) {
	t.mu.Lock()
	closed := t.closed
	if _, ok := t.inside[v]; !ok && !closed {
		t.inside[v] = t.order.PushBack(entry[T]{v, time.Now()})
	}
	t.mu.Unlock()
	if closed {
		t.lost(v)
	}
}

// lost hands v to Lost, if set.
func (t *tracker[T]) lost(v T) {
	if t.opt.Lost != nil {
		t.opt.Lost(v)
	}
}

// leave forgets v on its first way out; a fanned-out copy is not a loss.
func (t *tracker[T]) leave(v T) {
	t.mu.Lock()
	if e, ok := t.inside[v]; ok {
		t.order.Remove(e)
		delete(t.inside, v)
	}
	t.mu.Unlock()
}

// close ends the sweeps and hands what is still inside to Lost.
func (t *tracker[T]) close() {
	close(t.done)
	t.mu.Lock()
	t.closed = true
	left := t.takeLocked(func(entry[T]) bool { return true })
	t.mu.Unlock()
	for _, v := range left {
		t.lost(v)
	}
}

// takeLocked removes and returns the oldest elements while ok says so.
func (t *tracker[T]) takeLocked(ok func(entry[T]) bool) []T {
	var vs []T
	for e := t.order.Front(); e != nil && ok(e.Value.(entry[T])); e = t.order.Front() {
		en := t.order.Remove(e).(entry[T])
		delete(t.inside, en.v)
		vs = append(vs, en.v)
	}
	return vs
}

// sweep hands Late the elements inside for Hold, and calls Watch every
// Hold/2, until close or ctx ends (build may panic: then close never
// runs). It wakes at least every Hold/2, so an element that
// goes in while it waits is swept in time: its Hold ends after that.
func (t *tracker[T]) sweep(ctx context.Context) {
	hold := t.opt.Hold
	timer := time.NewTimer(hold / 2)
	defer timer.Stop()
	tick := time.Now().Add(hold / 2)
	for {
		select {
		case <-timer.C:
		case <-t.done:
			return
		case <-ctx.Done():
			return
		}
		now := time.Now()
		watch := !now.Before(tick)
		if watch {
			tick = now.Add(hold / 2)
		}
		t.mu.Lock()
		late := t.lateLocked(now)
		next, n, oldest := tick, t.order.Len(), *new(T)
		if f := t.order.Front(); f != nil {
			e := f.Value.(entry[T])
			oldest = e.v
			if d := e.at.Add(hold); d.Before(next) {
				next = d
			}
		}
		t.mu.Unlock()
		if len(late) > 0 && t.opt.Late != nil {
			t.opt.Late(late)
		}
		if watch && t.opt.Watch != nil {
			t.opt.Watch(n, oldest)
		}
		timer.Reset(max(time.Until(next), 0))
	}
}

// lateLocked takes the elements to hand Late at now: none unless the
// oldest has been inside for Hold, else those that went in up to Hold/8
// after it.
func (t *tracker[T]) lateLocked(now time.Time) []T {
	f := t.order.Front()
	if f == nil {
		return nil
	}
	first := f.Value.(entry[T]).at
	if first.Add(t.opt.Hold).After(now) {
		return nil
	}
	cut := first.Add(t.opt.Hold / 8)
	return t.takeLocked(func(e entry[T]) bool { return !e.at.After(cut) })
}

// tap calls f for each element on its way through.
func tap[T any](g *stage.Group, in <-chan T, f func(T)) <-chan T {
	out := make(chan T)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		for {
			v, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			f(v) // before the graph can see it (and let it out)
			if !stage.Send(ctx, out, v) {
				return nil
			}
		}
	})
	return out
}

// StreamsSource adapts one of our sources (or a typed channel) to
// streams.Source. Create it with NewStreamsSource.
type StreamsSource[T any] struct {
	g   *stage.Group
	out chan any
}

var _ streams.Source = (*StreamsSource[int])(nil)

// NewStreamsSource starts src under g and exposes it as a streams.Source.
// The go-streams inlet it feeds is closed when src ends or g is cancelled.
func NewStreamsSource[T any](g *stage.Group, src stage.Source[T]) *StreamsSource[T] {
	s := &StreamsSource[T]{g: g, out: make(chan any)}
	pumpOut(g, src.Run(g), s.out)
	return s
}

// Out returns the source's output channel.
func (s *StreamsSource[T]) Out() <-chan any { return s.out }

// Via streams the source into operator and returns it.
func (s *StreamsSource[T]) Via(operator streams.Flow) streams.Flow {
	gsflow.DoStream(s, operator)
	return operator
}

// StreamsFlow adapts one of our flows to streams.Flow, so our stages can sit
// between go-streams operators.
type StreamsFlow[In, Out any] struct {
	in  chan any
	out chan any
}

var _ streams.Flow = (*StreamsFlow[int, int])(nil)

// NewStreamsFlow starts f under g. Elements of the wrong type fail g.
func NewStreamsFlow[In, Out any](g *stage.Group, f stage.Flow[In, Out]) *StreamsFlow[In, Out] {
	s := &StreamsFlow[In, Out]{in: make(chan any), out: make(chan any)}
	typed := make(chan In)
	pumpIn(g, s.in, typed, nil)
	pumpOut(g, f.Run(g, typed), s.out)
	return s
}

// In returns the flow's input channel.
func (s *StreamsFlow[In, Out]) In() chan<- any { return s.in }

// Out returns the flow's output channel.
func (s *StreamsFlow[In, Out]) Out() <-chan any { return s.out }

// Via streams the flow's output into operator and returns it.
func (s *StreamsFlow[In, Out]) Via(operator streams.Flow) streams.Flow {
	gsflow.DoStream(s, operator)
	return operator
}

// To streams the flow's output into sink and blocks until it completed.
func (s *StreamsFlow[In, Out]) To(sink streams.Sink) {
	gsflow.DoStream(s, sink)
	sink.AwaitCompletion()
}

// StreamsSink adapts one of our sinks to streams.Sink.
type StreamsSink[T any] struct {
	in   chan any
	done chan struct{}
}

var _ streams.Sink = (*StreamsSink[int])(nil)

// NewStreamsSink starts sink under g. Its input keeps being drained after
// the sink stopped (error or cancellation), so upstream go-streams
// goroutines never block forever on it.
func NewStreamsSink[T any](g *stage.Group, sink stage.Sink[T]) *StreamsSink[T] {
	s := &StreamsSink[T]{in: make(chan any), done: make(chan struct{})}
	typed := make(chan T)
	pumpIn(g, s.in, typed, nil)
	g.Go(func(context.Context) error {
		defer close(s.done)
		return sink.Run(g, typed)
	})
	return s
}

// In returns the sink's input channel.
func (s *StreamsSink[T]) In() chan<- any { return s.in }

// AwaitCompletion blocks until the sink has finished.
func (s *StreamsSink[T]) AwaitCompletion() { <-s.done }
