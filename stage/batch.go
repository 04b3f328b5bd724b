// The batch hand-off between stages: a stage that can also take or hand
// on whole batches implements the Batch variant of its interface
// (BatchSource, BatchFlow, BatchSink), and pipeline connects two such
// stages with a channel of batches — one channel operation per batch
// instead of one per element. Every per-element guarantee is the same
// either way; batches only save hand-offs. Stages that do not implement
// them are connected element by element, so any stage composes with any.

package stage

import "context"

// BatchSource is a Source that can also produce batches.
type BatchSource[T any] interface {
	Source[T]
	// RunBatches is Run producing batches. A batch, once sent, belongs to
	// the receiver.
	RunBatches(g *Group) <-chan []T
}

// BatchFlow is a Flow that can also take and produce batches.
type BatchFlow[In, Out any] interface {
	Flow[In, Out]
	// RunBatches is Run on batches.
	RunBatches(g *Group, in <-chan []In) <-chan []Out
}

// BatchSink is a Sink that can also take batches.
type BatchSink[T any] interface {
	Sink[T]
	// RunBatches is Run on batches.
	RunBatches(g *Group, in <-chan []T) error
}

// Unbatch hands on the elements of in's batches one at a time, in order,
// on one goroutine of g. The output closes when in closes or g is
// cancelled; on cancellation the elements not yet handed on go to drop (if
// set), so their owner can settle them.
func Unbatch[T any](g *Group, in <-chan []T, drop func(T)) <-chan T {
	out := make(chan T)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		for {
			b, ok := Recv(ctx, in)
			if !ok {
				return nil
			}
			for i, v := range b {
				if !Send(ctx, out, v) {
					dropEach(b[i:], drop)
					return nil
				}
			}
		}
	})
	return out
}

// dropEach hands each of vs to drop, if drop is set.
func dropEach[T any](vs []T, drop func(T)) {
	if drop == nil {
		return
	}
	for _, v := range vs {
		drop(v)
	}
}
