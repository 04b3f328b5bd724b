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
	odd := pipeline.Filter(func(v int) bool { return v%2 == 1 }, nil)
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
