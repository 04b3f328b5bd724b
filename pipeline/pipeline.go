// Package pipeline is the DSL that wires stages together:
//
//	err := pipeline.From(src).Via(f, g).To(sink)
//
// To blocks until the sink has finished and returns the first error of any
// stage; cancelling the context (FromContext) tears every stage down, and a
// failing stage cancels the rest. A step that changes the element type is a
// package function, Map, because Go methods cannot take type parameters.
//
// Streams, StreamsSource, StreamsFlow and StreamsSink are the interop
// surface with github.com/reugn/go-streams: all conversion from any and all
// type checks live in this package, and a wrong element type is an error,
// never a panic.
package pipeline

import (
	"context"

	"github.com/pubsubflow/pubsubflow/stage"
)

// Pipeline is a source with zero or more flows applied, not yet running.
// It is a value: Via returns a new Pipeline and the receiver is unchanged.
//
// Between two stages that both take batches (stage.BatchSource,
// stage.BatchFlow, stage.BatchSink) the pipeline hands on whole batches,
// one channel operation per batch; between any others, single elements.
type Pipeline[T any] struct {
	ctx context.Context
	run func(g *stage.Group, batches bool) ports[T]
	src stage.Fuser[T] // the source, while no flow follows it and it can fuse
}

// ports is a running stage's output: batches when it was asked for them
// and can make them, else single elements. Exactly one is set.
type ports[T any] struct {
	one  <-chan T
	many <-chan []T
}

// single returns the output element by element.
func (p ports[T]) single(g *stage.Group) <-chan T {
	if p.many != nil {
		return stage.Unbatch(g, p.many, nil)
	}
	return p.one
}

// From starts a pipeline at src under context.Background(). Stop it by
// closing whatever src is bound to, or use FromContext.
func From[T any](src stage.Source[T]) Pipeline[T] {
	return FromContext(context.Background(), src)
}

// FromContext starts a pipeline at src that stops when ctx is done.
func FromContext[T any](ctx context.Context, src stage.Source[T]) Pipeline[T] {
	p := Pipeline[T]{ctx: ctx, run: func(g *stage.Group, batches bool) ports[T] {
		if bs, ok := src.(stage.BatchSource[T]); ok && batches {
			return ports[T]{many: bs.RunBatches(g)}
		}
		return ports[T]{one: src.Run(g)}
	}}
	p.src, _ = src.(stage.Fuser[T])
	return p
}

// Via appends flows that keep the element type. A flow written right
// after a source that can take it in (a stage.Fuser: source.Subscribe's
// source takes the receipt steps flow.EagerTrack, flow.FlowGate and
// flow.KeyedFlowGate) runs inside the source instead of as a stage of its
// own.
func (p Pipeline[T]) Via(flows ...stage.Flow[T, T]) Pipeline[T] {
	for _, f := range flows {
		if p.src != nil {
			if fused, ok := p.src.Fuse(f); ok {
				p = FromContext(p.ctx, fused)
				continue
			}
		}
		p = Map(p, f)
	}
	return p
}

// Map appends a flow that changes the element type.
func Map[T, R any](p Pipeline[T], f stage.Flow[T, R]) Pipeline[R] {
	up := p.run
	return Pipeline[R]{ctx: p.ctx, run: func(g *stage.Group, batches bool) ports[R] {
		if bf, ok := f.(stage.BatchFlow[T, R]); ok {
			in := up(g, true)
			if in.many == nil {
				return ports[R]{one: f.Run(g, in.one)}
			}
			out := ports[R]{many: bf.RunBatches(g, in.many)}
			if !batches {
				return ports[R]{one: out.single(g)}
			}
			return out
		}
		return ports[R]{one: f.Run(g, up(g, false).single(g))}
	}}
}

// To runs the pipeline into sink and blocks until every stage has exited.
// It returns the first stage error, the context's error if the pipeline was
// cancelled, or nil when the source was exhausted and the sink finished.
//
// A stage that panics — the sink itself (a ForEach), a flow's Run, or a
// goroutine a stage started with its group — ends the pipeline with a
// *stage.PanicError like any failing stage: the others are cancelled and
// settle what they hold, and To returns once they have all exited.
func (p Pipeline[T]) To(sink stage.Sink[T]) error {
	g := stage.NewGroup(p.ctx)
	err := stage.Safe(func() error {
		if bs, ok := sink.(stage.BatchSink[T]); ok {
			in := p.run(g, true)
			if in.many != nil {
				return bs.RunBatches(g, in.many)
			}
			return sink.Run(g, in.one)
		}
		return sink.Run(g, p.run(g, false).single(g))
	})
	if err != nil {
		g.Fail(err)
	}
	g.Cancel() // the sink is done: stop whatever still runs upstream
	return g.Wait()
}
