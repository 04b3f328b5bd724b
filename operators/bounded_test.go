package operators

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// boundedModes are the ways a ParallelMap runs: its three Modes, and an
// Unordered map fed batches.
var boundedModes = []string{"unordered", "unordered-batches", "ordered", "keyed"}

// peakGoroutines runs ParallelMap(1e6) in mode over elems elements and
// returns the most goroutines seen from inside f, above those running
// before. With lockstep the source sends the next element only once the
// previous result came out: one element in flight at a time.
func peakGoroutines(t *testing.T, mode string, elems int, lockstep bool) int {
	t.Helper()
	base := runtime.NumGoroutine()
	var peak atomic.Int64
	f := func(_ context.Context, v int) (int, error) {
		n := int64(runtime.NumGoroutine())
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		return v, nil
	}
	opt := Options[int, int]{Key: func(v int) string { return fmt.Sprint(v) }}
	switch mode {
	case "ordered":
		opt.Mode = Ordered
	case "keyed":
		opt.Mode = Keyed
	}
	// next is the consumer's go-ahead; without lockstep the source does
	// not wait for it, so it has room for every element.
	next := make(chan struct{}, elems)
	g := stage.NewGroup(context.Background())
	in := make(chan int)
	g.Go(func(ctx context.Context) error {
		defer close(in)
		for i := range elems {
			if !stage.Send(ctx, in, i) {
				return nil
			}
			if !lockstep {
				continue
			}
			if _, ok := stage.Recv(ctx, next); !ok {
				return nil
			}
		}
		return nil
	})
	pm := ParallelMap(1_000_000, f, opt)
	got := 0
	if mode == "unordered-batches" {
		bin := make(chan []int)
		g.Go(func(ctx context.Context) error {
			defer close(bin)
			for v := range in {
				if !stage.Send(ctx, bin, []int{v}) {
					return nil
				}
			}
			return nil
		})
		for b := range pm.(stage.BatchFlow[int, int]).RunBatches(g, bin) {
			got += len(b)
			next <- struct{}{} // lockstep: batches of one, one at a time
		}
	} else {
		for range pm.Run(g, in) {
			got++
			next <- struct{}{}
		}
	}
	if err := g.Wait(); err != nil || got != elems {
		t.Fatalf("%s: got %d of %d, err %v", mode, got, elems, err)
	}
	return int(peak.Load()) - base
}

// TestParallelMapGoroutinesBounded: ParallelMap(1e6) over 1,000 elements
// runs no more goroutines than it has elements in flight, plus a few, in
// every mode; one element at a time costs a few goroutines, not 1e6.
func TestParallelMapGoroutinesBounded(t *testing.T) {
	for _, mode := range boundedModes {
		t.Run(mode, func(t *testing.T) {
			free, one := peakGoroutines(t, mode, 1000, false), peakGoroutines(t, mode, 1000, true)
			t.Logf("%s: peak goroutines above base: free-running %d, one in flight %d", mode, free, one)
			if got := free; got > 1000+50 {
				t.Errorf("free-running: %d goroutines above the base, want at most 1050", got)
			}
			if got := one; got > 16 {
				t.Errorf("one element in flight: %d goroutines above the base, want at most 16", got)
			}
		})
	}
}

// TestParallelMapBadModeAndWindow: an unknown Mode and a Window beyond
// MaxWindow fail the group with an error naming the option.
func TestParallelMapBadModeAndWindow(t *testing.T) {
	id := func(_ context.Context, v int) (int, error) { return v, nil }
	for _, c := range []struct {
		opt  Options[int, int]
		want string
	}{
		{Options[int, int]{Mode: 42}, "operators: ParallelMap: unknown Mode 42"},
		{Options[int, int]{Mode: Ordered, Window: 1 << 50}, "operators: ParallelMap: Window 1125899906842624 outside 0..MaxWindow (65536)"},
		{Options[int, int]{Mode: Keyed, Window: MaxWindow + 1, Key: func(int) string { return "" }}, "Window 65537 outside 0..MaxWindow"},
	} {
		g := stage.NewGroup(context.Background())
		for range ParallelMap(3, id, c.opt).Run(g, pipeline.Slice(1, 2).Run(g)) {
			t.Errorf("%+v: emitted a result", c.opt)
		}
		if err := g.Wait(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Mode %d Window %d: %v, want %q", c.opt.Mode, c.opt.Window, err, c.want)
		}
	}
}
