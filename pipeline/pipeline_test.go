package pipeline

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/stage"
)

func ints(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

type item struct{ n int }

func items(n int) []*item {
	s := make([]*item, n)
	for i := range s {
		s[i] = &item{i}
	}
	return s
}

func double() stage.Flow[int, int] {
	return operators.ParallelMap(2, func(_ context.Context, v int) (int, error) { return 2 * v, nil })
}

func TestFromViaTo(t *testing.T) {
	var got []int
	err := From(Slice(ints(100)...)).Via(double(), double()).To(ForEach(func(_ context.Context, v int) error {
		got = append(got, v)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	for i, v := range got {
		if v != 4*i {
			t.Fatalf("got[%d] = %d", i, v)
		}
	}
}

func TestMapChangesType(t *testing.T) {
	toStr := operators.ParallelMap(1, func(_ context.Context, v int) (string, error) { return string(rune('a' + v)), nil }, operators.Options[int, string]{Mode: operators.Ordered})
	var got string
	err := Map(From(Slice(0, 1, 2)), toStr).To(ForEach(func(_ context.Context, s string) error { got += s; return nil }))
	if err != nil || got != "abc" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestStageErrorCancelsRest(t *testing.T) {
	boom := errors.New("boom")
	failing := operators.ParallelMap(1, func(_ context.Context, v int) (int, error) {
		if v == 5 {
			return 0, boom
		}
		return v, nil
	})
	err := From(Slice(ints(1000)...)).Via(failing).To(ForEach(func(context.Context, int) error { return nil }))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestSinkErrorIsReturned(t *testing.T) {
	boom := errors.New("sink boom")
	err := From(Slice(ints(10)...)).To(ForEach(func(_ context.Context, v int) error {
		if v == 3 {
			return boom
		}
		return nil
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}

// TestFanOutAndMergeWithGoStreams: a go-streams RoundRobin splits into two
// branches, each one of our stages, merged back by go-streams; every element
// arrives exactly once.
func TestFanOutAndMergeWithGoStreams(t *testing.T) {
	const n = 2000
	var branchA, branchB atomic.Int64
	counting := func(c *atomic.Int64) stage.Flow[int, int] {
		return operators.ParallelMap(2, func(_ context.Context, v int) (int, error) { c.Add(1); return v, nil })
	}
	topology := Streams[int, int](func(g *stage.Group, in streams.Source) streams.Outlet {
		branches := gsflow.RoundRobin(in, 2)
		a := branches[0].Via(NewStreamsFlow(g, counting(&branchA)))
		b := branches[1].Via(NewStreamsFlow(g, counting(&branchB)))
		return gsflow.Merge(a, b)
	}, StreamsOptions[int]{})
	seen := make([]int, n)
	err := From(Slice(ints(n)...)).Via(topology).To(ForEach(func(_ context.Context, v int) error {
		seen[v]++
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("element %d arrived %d times", i, c)
		}
	}
	if branchA.Load() == 0 || branchB.Load() == 0 || branchA.Load()+branchB.Load() != n {
		t.Fatalf("branches saw %d and %d", branchA.Load(), branchB.Load())
	}
}

// TestCancelMidStreamLeavesNoGoroutine cancels while go-streams operators
// hold elements and our sink is stalled; goleak in TestMain checks nothing
// is left.
func TestCancelMidStreamLeavesNoGoroutine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	stalled := make(chan struct{})
	topology := Streams[int, int](func(g *stage.Group, in streams.Source) streams.Outlet {
		branches := gsflow.FanOut(in, 2)
		return gsflow.Merge(branches[0].Via(gsflow.NewPassThrough()), branches[1].Via(NewStreamsFlow(g, double())))
	}, StreamsOptions[int]{})
	err := FromContext(ctx, Slice(ints(100000)...)).Via(topology).To(ForEach(func(ctx context.Context, v int) error {
		once.Do(func() { close(stalled); cancel() })
		<-ctx.Done()
		return nil
	}))
	<-stalled
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestWrongTypeIsAnError(t *testing.T) {
	topology := Streams[int, int](func(g *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewMap(func(v int) string { return "oops" }, 1))
	}, StreamsOptions[int]{})
	err := From(Slice(1, 2, 3)).Via(topology).To(ForEach(func(context.Context, int) error { return nil }))
	var te *TypeError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want *TypeError", err)
	}
}

// TestWrongTypeEndsAtOnce: a wrong element type ends the pipeline while
// its source still has more to give (it never ends on its own here): the
// other stages are cancelled, and the source's stage sees it.
func TestWrongTypeEndsAtOnce(t *testing.T) {
	sourceStopped := make(chan struct{})
	endless := stage.SourceFunc[int](func(g *stage.Group) <-chan int {
		out := make(chan int)
		g.Go(func(ctx context.Context) error {
			defer close(sourceStopped)
			defer close(out)
			for i := 0; stage.Send(ctx, out, i); i++ {
			}
			return nil
		})
		return out
	})
	topology := Streams[int, int](func(g *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewMap(func(v int) any {
			if v == 100 {
				return "oops"
			}
			return v
		}, 1))
	}, StreamsOptions[int]{})
	done := make(chan error, 1)
	go func() {
		done <- From(endless).Via(topology).To(ForEach(func(context.Context, int) error { return nil }))
	}()
	select {
	case err := <-done:
		var te *TypeError
		if !errors.As(err, &te) || te.Got != "oops" {
			t.Fatalf("err = %v, want the *TypeError of the string", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pipeline did not end on the wrong type")
	}
	<-sourceStopped
}

// TestFilteredElementsAreReportedLost: what a go-streams Filter drops is
// handed to Lost, not silently forgotten.
func TestFilteredElementsAreReportedLost(t *testing.T) {
	var lost []int
	topology := Streams[*item, *item](func(g *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewFilter(func(v *item) bool { return v.n%3 != 0 }, 2))
	}, StreamsOptions[*item]{Lost: func(v *item) { lost = append(lost, v.n) }})
	kept := 0
	err := From(Slice(items(30)...)).Via(topology).To(ForEach(func(context.Context, *item) error { kept++; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lost)
	if kept != 20 || len(lost) != 10 || lost[0] != 0 || lost[9] != 27 {
		t.Fatalf("kept %d, lost %v", kept, lost)
	}
}

// TestStandaloneAdapters uses go-streams as the outer DSL with our source
// and sink at its ends.
func TestStandaloneAdapters(t *testing.T) {
	g := stage.NewGroup(context.Background())
	var sum atomic.Int64
	src := NewStreamsSource(g, Slice(ints(101)...))
	sink := NewStreamsSink(g, ForEach(func(_ context.Context, v int) error { sum.Add(int64(v)); return nil }))
	src.Via(gsflow.NewFilter(func(v int) bool { return v%2 == 0 }, 1)).To(sink)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if sum.Load() != 2550 {
		t.Fatalf("sum %d", sum.Load())
	}
}
