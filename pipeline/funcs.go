package pipeline

import (
	"context"
	"errors"

	"github.com/pubsubflow/pubsubflow/stage"
)

// Slice is a source that emits the elements of vals in order.
func Slice[T any](vals ...T) stage.Source[T] {
	return stage.SourceFunc[T](func(g *stage.Group) <-chan T {
		out := make(chan T)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for _, v := range vals {
				if !stage.Send(ctx, out, v) {
					return nil
				}
			}
			return nil
		})
		return out
	})
}

// ForEach is a sink that calls f for each element, in order, on one
// goroutine. An error from f fails the pipeline.
func ForEach[T any](f func(context.Context, T) error) stage.Sink[T] {
	return stage.SinkFunc[T](func(g *stage.Group, in <-chan T) error {
		ctx := g.Context()
		for {
			v, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			if err := f(ctx, v); err != nil {
				return err
			}
		}
	})
}

// settler is an element with an outcome: a message (source.Message).
type settler interface{ Settled() bool }

var errUnsettledDrop = errors.New("pipeline: Filter: dropped returned with the message unsettled (it would be held until its lease ends); settle it there (Ack: not wanted, Nack: try again), or use pubsubflow.Filter")

// Filter is a flow that keeps the elements for which keep returns true and
// hands every other element to dropped, which is required: a Filter with
// a nil dropped ends the pipeline with an error at once, so nothing it
// drops can vanish.
//
// For messages, use pubsubflow.Filter, which takes the drop's outcome
// itself. Here dropped must settle each message before it returns, and
// so say what the drop means: m.Ack() — processed, not wanted; m.Nack() —
// try again, redelivered at once (a message keep always refuses then goes
// round as fast as the stream carries it, for ever: a nack loop);
// m.NackAfter(d) — try again after d. A dropped message that is still
// unsettled when dropped returns (it would be held until its lease ends)
// ends the pipeline with an error at once.
func Filter[T any](keep func(T) bool, dropped func(T)) stage.Flow[T, T] {
	return stage.FlowFunc[T, T](func(g *stage.Group, in <-chan T) <-chan T {
		out := make(chan T)
		if keep == nil || dropped == nil {
			g.Fail(errors.New("pipeline: Filter needs keep and dropped (dropped says what a dropped element means)"))
			close(out)
			return out
		}
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for {
				v, ok := stage.Recv(ctx, in)
				if !ok {
					return nil
				}
				if !keep(v) {
					dropped(v)
					if m, ok := any(v).(settler); ok && !m.Settled() {
						return errUnsettledDrop
					}
					continue
				}
				if !stage.Send(ctx, out, v) {
					return nil
				}
			}
		})
		return out
	})
}
