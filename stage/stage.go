package stage

// Source starts producing into the returned channel under g. The channel is
// closed when the source ends (exhausted, failed or cancelled).
type Source[T any] interface {
	Run(g *Group) <-chan T
}

// Flow consumes in and produces into the returned channel under g. The
// returned channel is closed when the flow ends; a flow ends after in is
// closed and everything it holds has been emitted, or when g is cancelled.
type Flow[In, Out any] interface {
	Run(g *Group, in <-chan In) <-chan Out
}

// Sink consumes in under g until in is closed or g is cancelled. Run blocks
// until the sink has finished with everything it received.
type Sink[T any] interface {
	Run(g *Group, in <-chan T) error
}

// SourceFunc adapts a function to Source.
type SourceFunc[T any] func(g *Group) <-chan T

// Run calls f(g).
func (f SourceFunc[T]) Run(g *Group) <-chan T { return f(g) }

// FlowFunc adapts a function to Flow.
type FlowFunc[In, Out any] func(g *Group, in <-chan In) <-chan Out

// Run calls f(g, in).
func (f FlowFunc[In, Out]) Run(g *Group, in <-chan In) <-chan Out { return f(g, in) }

// SinkFunc adapts a function to Sink.
type SinkFunc[T any] func(g *Group, in <-chan T) error

// Run calls f(g, in).
func (f SinkFunc[T]) Run(g *Group, in <-chan T) error { return f(g, in) }

// Fuser is a Source that can take the flow written right after it into
// itself: run it in place instead of as a stage of its own (a StreamingPull
// source runs its receipt steps where it decodes a response, before any
// message waits anywhere). Pipeline.Via asks; Fuse returns the source to
// use instead, or ok false to run f as a stage as usual.
type Fuser[T any] interface {
	Source[T]
	Fuse(f Flow[T, T]) (Source[T], bool)
}
