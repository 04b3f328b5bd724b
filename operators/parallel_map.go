package operators

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/pubsubflow/pubsubflow/stage"
)

// Mode selects how ParallelMap orders its output.
type Mode int

const (
	// Unordered emits each result as soon as it is ready.
	Unordered Mode = iota
	// Ordered emits results in input order, holding at most Window
	// elements between input and output.
	Ordered
	// Keyed runs elements of one key one at a time in arrival order and
	// elements of different keys in parallel. Results of one key are
	// emitted in input order.
	Keyed
)

// MaxWindow bounds Options.Window: a larger Window fails the group rather
// than allocating a reorder window the process cannot hold. An Ordered
// map given no Window uses min(2×n, MaxWindow).
const MaxWindow = 1 << 16

// Options configure ParallelMap. The zero value means Unordered.
type Options[T, R any] struct {
	Mode Mode
	// Window bounds the elements an Ordered map holds between input and
	// output (in flight plus waiting to be emitted in order), and the
	// elements a Keyed map buffers behind busy keys. Zero means
	// min(2×n, MaxWindow) for Ordered and 1000 for Keyed; beyond MaxWindow
	// (or below zero) fails the group.
	Window int
	// Key returns an element's key in Keyed mode (required there).
	Key func(T) string
	// OnError, if set, turns an element's error (including a recovered
	// panic) into a result: emit reports whether to emit r. When nil, the
	// first error fails the group.
	OnError func(v T, err error) (r R, emit bool)
	// Emit, if set, is asked for every result about to be emitted
	// (OnError's included); false drops it instead of sending it
	// downstream. A worker whose result is done with (a message already
	// settled by f) then goes straight on to its next element, without a
	// hand-off to a downstream goroutine that would have nothing to do.
	Emit func(r R) bool
}

// ParallelMap returns a flow that applies f to each element with up to n
// worker goroutines (n < 1 is treated as 1), started only as elements
// are in flight, so a large n costs nothing until the load needs it. An
// unknown Mode, or a Window outside 0..MaxWindow, fails the group. An error from f, or a panic
// in it (recovered as a *stage.PanicError), fails the group and so ends
// the pipeline, unless Options.OnError turns it into a result: over
// messages, an OnError that nacks the message and emits nothing keeps
// the pipeline going. opts is at most one Options; without it the map is
// Unordered with no error handler. More than one fails the group.
func ParallelMap[T, R any](n int, f func(context.Context, T) (R, error), opts ...Options[T, R]) stage.Flow[T, R] {
	var opt Options[T, R]
	switch len(opts) {
	case 0:
	case 1:
		opt = opts[0]
	default:
		return failing[T, R](fmt.Errorf("operators: ParallelMap takes at most one Options, got %d", len(opts)))
	}
	if opt.Window < 0 || opt.Window > MaxWindow {
		return failing[T, R](fmt.Errorf("operators: ParallelMap: Window %d outside 0..MaxWindow (%d)", opt.Window, MaxWindow))
	}
	pm := &parallelMap[T, R]{n: max(n, 1), f: f, opt: opt}
	switch opt.Mode {
	case Unordered:
		return unorderedFlow[T, R]{pm}
	case Ordered:
		return stage.FlowFunc[T, R](pm.ordered)
	case Keyed:
		if opt.Key == nil {
			return failing[T, R](fmt.Errorf("operators: ParallelMap in Keyed mode needs Options.Key"))
		}
		return stage.FlowFunc[T, R](pm.keyed)
	default:
		return failing[T, R](fmt.Errorf("operators: ParallelMap: unknown Mode %d", opt.Mode))
	}
}

// failing is a flow that fails its group with err and emits nothing: how a
// misconfigured operator ends the pipeline it is wired into.
func failing[T, R any](err error) stage.Flow[T, R] {
	return stage.FlowFunc[T, R](func(g *stage.Group, in <-chan T) <-chan R {
		g.Fail(err)
		out := make(chan R)
		close(out)
		return out
	})
}

type parallelMap[T, R any] struct {
	n   int
	f   func(context.Context, T) (R, error)
	opt Options[T, R]
}

// call runs f, turning a panic into a *PanicError and applying OnError.
// ok reports whether r is to be emitted; err is a failure for the group.
// Once ctx is done f is not called and v is dropped: a worker may still
// take elements it finds ready, but a cancelled pipeline processes
// nothing more (a source settles what its pipeline left).
func (pm *parallelMap[T, R]) call(ctx context.Context, v T) (r R, ok bool, err error) {
	if ctx.Err() != nil {
		return r, false, nil
	}
	r, err = safeCall(ctx, pm.f, v)
	switch {
	case err == nil:
		ok = true
	case pm.opt.OnError != nil:
		r, ok = pm.opt.OnError(v, err)
	default:
		return r, false, err
	}
	if ok && pm.opt.Emit != nil {
		ok = pm.opt.Emit(r)
	}
	return r, ok, nil
}

func safeCall[T, R any](ctx context.Context, f func(context.Context, T) (R, error), v T) (r R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &stage.PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return f(ctx, v)
}

func (pm *parallelMap[T, R]) unordered(g *stage.Group, in <-chan T) <-chan R {
	out := make(chan R)
	workers := stage.NewGroup(g.Context())
	newSpawner(workers, pm.n, func(ctx context.Context, s *spawner) error {
		for {
			v, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			s.busy()
			if ok, err := pm.apply(ctx, v, out); !ok {
				return err
			}
			s.ready()
		}
	}).start()
	closeAfter(g, workers, out)
	return out
}

// apply calls f on v and sends its result on out (unless OnError dropped
// it). It reports whether the worker goes on: false with the error that
// fails the stage, or with nil once ctx is done.
func (pm *parallelMap[T, R]) apply(ctx context.Context, v T, out chan<- R) (bool, error) {
	r, emit, err := pm.call(ctx, v)
	if err != nil {
		return false, err
	}
	return !emit || stage.Send(ctx, out, r), nil
}

// closeAfter closes out once every goroutine of inner has returned, and
// fails g with inner's first error.
func closeAfter[R any](g, inner *stage.Group, out chan R) {
	g.Go(func(context.Context) error {
		defer close(out)
		return inner.Wait()
	})
}
