// Package batch is the batch hand-off between stages: a stage that can
// also take or hand on whole batches implements the Batch variant of its
// interface, and pipeline connects two such stages with a channel of
// batches — one channel operation per batch instead of one per element.
// Every per-element guarantee is the same either way; batches only save
// hand-offs. Stages that do not implement them are connected element by
// element, so any stage composes with any. It is internal because only the
// library's own stages (the Subscriber's source, ParallelMap, Acknowledge)
// gain from it.
package batch

import (
	"context"

	"github.com/pubsubflow/pubsubflow/stage"
)

// Source is a stage.Source that can also produce batches.
type Source[T any] interface {
	stage.Source[T]
	// RunBatches is Run producing batches. A batch, once sent, belongs to
	// the receiver.
	RunBatches(g *stage.Group) <-chan []T
}

// Flow is a stage.Flow that can also take and produce batches.
type Flow[In, Out any] interface {
	stage.Flow[In, Out]
	// RunBatches is Run on batches.
	RunBatches(g *stage.Group, in <-chan []In) <-chan []Out
}

// Sink is a stage.Sink that can also take batches.
type Sink[T any] interface {
	stage.Sink[T]
	// RunBatches is Run on batches.
	RunBatches(g *stage.Group, in <-chan []T) error
}

// Unbatch hands on the elements of in's batches one at a time, in order,
// on one goroutine of g. The output closes when in closes or g is
// cancelled; on cancellation the elements not yet handed on go to drop (if
// set), so their owner can settle them.
func Unbatch[T any](g *stage.Group, in <-chan []T, drop func(T)) <-chan T {
	out := make(chan T)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		for {
			b, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			for i, v := range b {
				if !stage.Send(ctx, out, v) {
					Drop(b[i:], drop)
					return nil
				}
			}
		}
	})
	return out
}

// Drop hands each of vs to drop, if drop is set.
func Drop[T any](vs []T, drop func(T)) {
	if drop == nil {
		return
	}
	for _, v := range vs {
		drop(v)
	}
}
