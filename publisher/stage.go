package publisher

import (
	"context"
	"fmt"

	"github.com/pubsubflow/pubsubflow/stage"
)

// defaultStageWindow is the parallelism of a Stage given none: how many
// publishes it keeps unsettled at once. It is ten default batches, enough
// to keep batching efficient.
const defaultStageWindow = 1000

// Outcome is the settled publish of one stage element: In is the element,
// ID the server-assigned message id, Err the publish error (nil on
// success).
type Outcome[T any] struct {
	In  T
	ID  string
	Err error
}

// Stage returns a flow that publishes toMsg(v) for each element v and
// emits Outcome{In: v, …} in input order once that publish has settled.
// parallelism bounds the publishes the stage holds unsettled or unemitted
// (< 1 means 1000, ten default batches); it must be well above
// Config.MaxMessages for batches to fill. When the window is full the
// stage stops receiving, so backpressure reaches upstream. toMsg returning
// nil (ErrInvalidMessage) or panicking yields an Outcome with an error
// instead of a publish.
//
// The stage does not close p. When the group is cancelled, elements whose
// Outcome was not emitted are dropped (their publishes still settle).
func Stage[T any](p *Publisher, toMsg func(T) *Message, parallelism int) stage.Flow[T, Outcome[T]] {
	if parallelism < 1 {
		parallelism = defaultStageWindow
	}
	return stage.FlowFunc[T, Outcome[T]](func(g *stage.Group, in <-chan T) <-chan Outcome[T] {
		out := make(chan Outcome[T])
		// tokens bounds the window: the feeder takes one before it
		// receives, the emitter gives it back after it emitted.
		tokens := make(chan struct{}, parallelism)
		window := make(chan pendingPublish[T], parallelism)
		g.Go(func(ctx context.Context) error {
			defer close(window)
			for {
				select {
				case tokens <- struct{}{}:
				case <-ctx.Done():
					return nil
				}
				v, ok := stage.Recv(ctx, in)
				if !ok {
					return nil
				}
				window <- pendingPublish[T]{v: v, r: publishOne(ctx, p, toMsg, v)} // never blocks: tokens bound it
			}
		})
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for pp := range window {
				select {
				case <-pp.r.Ready():
				case <-ctx.Done():
					return nil
				}
				id, err := pp.r.Get(ctx)
				select {
				case out <- Outcome[T]{In: pp.v, ID: id, Err: err}:
				case <-ctx.Done():
					return nil
				}
				<-tokens
			}
			return nil
		})
		return out
	})
}

type pendingPublish[T any] struct {
	v T
	r *Result
}

func publishOne[T any](ctx context.Context, p *Publisher, toMsg func(T) *Message, v T) (r *Result) {
	defer func() {
		if e := recover(); e != nil {
			r = failed(fmt.Errorf("publisher: stage conversion panicked: %v", e))
		}
	}()
	m := toMsg(v)
	if m == nil {
		return failed(invalid("", "stage conversion returned nil"))
	}
	return p.Publish(ctx, m)
}
