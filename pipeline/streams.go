package pipeline

import (
	"context"
	"fmt"
	"reflect"
	"sync"

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
	// in and never came out (filtered, or held by a window at shutdown).
	// It applies only when In is a pointer type and the sub-graph's output
	// type is In; a message pipeline uses it to nack what a foreign
	// operator dropped instead of letting it vanish.
	Lost func(v In)
}

// Streams embeds a go-streams sub-graph as one flow of ours. build receives
// the group the flow runs in (for NewStreamsFlow adapters of our own stages
// inside the graph) and the input as a streams.Source, and returns the
// graph's outlet. Elements of the wrong type end the pipeline with a
// *TypeError.
func Streams[In, Out any](build func(g *stage.Group, in streams.Source) streams.Outlet, opt StreamsOptions[In]) stage.Flow[In, Out] {
	track := opt.Lost != nil && reflect.TypeFor[In]().Kind() == reflect.Pointer &&
		reflect.TypeFor[In]() == reflect.TypeFor[Out]()
	return stage.FlowFunc[In, Out](func(g *stage.Group, in <-chan In) <-chan Out {
		var inside *lossTracker[In]
		if track {
			inside = newLossTracker[In]()
			in = tap(g, in, inside.enter)
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
			defer inside.report(opt.Lost)
			for v := range mid {
				inside.leave(any(v).(In))
				select {
				case out <- v:
				case <-ctx.Done():
				}
			}
			return nil
		})
		return out
	})
}

// lossTracker records, by identity, the elements inside a sub-graph. Entry
// and exit run on two goroutines, hence the mutex.
type lossTracker[T any] struct {
	mu     sync.Mutex
	inside map[any]struct{}
}

func newLossTracker[T any]() *lossTracker[T] { return &lossTracker[T]{inside: map[any]struct{}{}} }

func (l *lossTracker[T]) enter(v T) {
	l.mu.Lock()
	l.inside[v] = struct{}{}
	l.mu.Unlock()
}

// leave forgets v on its first way out; a fanned-out copy is not a loss.
func (l *lossTracker[T]) leave(v T) {
	l.mu.Lock()
	delete(l.inside, v)
	l.mu.Unlock()
}

func (l *lossTracker[T]) report(lost func(T)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for v := range l.inside {
		lost(v.(T))
	}
}

// tap calls f for each element on its way through.
func tap[T any](g *stage.Group, in <-chan T, f func(T)) <-chan T {
	return Filter(func(v T) bool { f(v); return true }, nil).Run(g, in)
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
