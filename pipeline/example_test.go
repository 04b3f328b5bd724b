package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

func ExampleFrom() {
	odd := pipeline.Filter(func(v int) bool { return v%2 == 1 }, func(int) {}) // an even number means nothing here
	sum := 0
	err := pipeline.From(pipeline.Slice(1, 2, 3, 5)).Via(odd).
		To(pipeline.ForEach(func(_ context.Context, v int) error { sum += v; return nil }))
	fmt.Println(sum, err)
	// Output: 9 <nil>
}

// A go-streams sub-graph between our stages: fan out round-robin to two
// go-streams maps and merge back.
func ExampleStreams() {
	graph := pipeline.Streams[int, int](func(g *stage.Group, in streams.Source) streams.Outlet {
		br := gsflow.RoundRobin(in, 2)
		times10 := func() streams.Flow { return gsflow.NewMap(func(v int) int { return v * 10 }, 1) }
		return gsflow.Merge(br[0].Via(times10()), br[1].Via(times10()))
	}, pipeline.StreamsOptions[int]{})
	var sum atomic.Int64
	err := pipeline.From(pipeline.Slice(1, 2, 3, 4)).Via(graph).
		To(pipeline.ForEach(func(_ context.Context, v int) error { sum.Add(int64(v)); return nil }))
	fmt.Println(sum.Load(), err)
	// Output: 100 <nil>
}

// go-streams as the outer DSL, with our source and sink at its ends.
func ExampleNewStreamsSink() {
	g := stage.NewGroup(context.Background())
	var sum atomic.Int64
	src := pipeline.NewStreamsSource(g, pipeline.Slice(1, 2, 3, 4, 5, 6))
	sink := pipeline.NewStreamsSink(g, pipeline.ForEach(func(_ context.Context, v int) error { sum.Add(int64(v)); return nil }))
	src.Via(gsflow.NewFilter(func(v int) bool { return v%2 == 0 }, 1)).To(sink)
	fmt.Println(sum.Load(), g.Wait())
	// Output: 12 <nil>
}

// Map changes the element type along a pipeline (a method cannot take a
// type parameter, so it is a function).
func ExampleMap() {
	lengths := stage.FlowFunc[string, int](func(g *stage.Group, in <-chan string) <-chan int {
		out := make(chan int)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for s := range in {
				if !stage.Send(ctx, out, len(s)) {
					return nil
				}
			}
			return nil
		})
		return out
	})
	total := 0
	err := pipeline.Map(pipeline.From(pipeline.Slice("ab", "cde")), lengths).
		To(pipeline.ForEach(func(_ context.Context, n int) error { total += n; return nil }))
	fmt.Println(total, err)
	// Output: 5 <nil>
}

// FromContext runs a pipeline until ctx is done; a pipeline cancelled
// from outside returns the context's error.
func ExampleFromContext() {
	ctx, cancel := context.WithCancel(context.Background())
	err := pipeline.FromContext(ctx, pipeline.Slice(1, 2, 3)).
		To(pipeline.ForEach(func(_ context.Context, v int) error {
			if v == 2 {
				cancel()
			}
			return nil
		}))
	fmt.Println(err)
	// Output: context canceled
}

// Filter drops what keep refuses, and hands each dropped element to the
// second function (for messages, see pubsubflow.Filter).
func ExampleFilter() {
	var dropped []int
	even := pipeline.Filter(func(v int) bool { return v%2 == 0 }, func(v int) { dropped = append(dropped, v) })
	var kept []int
	err := pipeline.From(pipeline.Slice(1, 2, 3, 4)).Via(even).
		To(pipeline.ForEach(func(_ context.Context, v int) error { kept = append(kept, v); return nil }))
	fmt.Println(kept, dropped, err)
	// Output: [2 4] [1 3] <nil>
}

// ForEach ends the pipeline with the first error its function returns.
func ExampleForEach() {
	err := pipeline.From(pipeline.Slice(1, 2, 3)).
		To(pipeline.ForEach(func(_ context.Context, v int) error {
			if v == 2 {
				return fmt.Errorf("bad element %d", v)
			}
			return nil
		}))
	fmt.Println(err)
	// Output: bad element 2
}

// Slice is a source of fixed elements, handy in tests.
func ExampleSlice() {
	var got []string
	err := pipeline.From(pipeline.Slice("a", "b")).
		To(pipeline.ForEach(func(_ context.Context, v string) error { got = append(got, v); return nil }))
	fmt.Println(got, err)
	// Output: [a b] <nil>
}

// One of our flows inside a go-streams graph, between go-streams
// operators.
func ExampleNewStreamsFlow() {
	g := stage.NewGroup(context.Background())
	aboveOne := pipeline.NewStreamsFlow(g, pipeline.Filter(func(v int) bool { return v > 1 }, func(int) {}))
	var sum atomic.Int64
	sink := pipeline.NewStreamsSink(g, pipeline.ForEach(func(_ context.Context, v int) error { sum.Add(int64(v)); return nil }))
	pipeline.NewStreamsSource(g, pipeline.Slice(1, 2, 3)).Via(aboveOne).To(sink)
	fmt.Println(sum.Load(), g.Wait())
	// Output: 5 <nil>
}
