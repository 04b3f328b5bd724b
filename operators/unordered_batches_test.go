package operators

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/stage"
)

// batches sends vals in batches of the given sizes (cycled).
func batches(g *stage.Group, vals []int, sizes []int) <-chan []int {
	ch := make(chan []int)
	g.Go(func(ctx context.Context) error {
		defer close(ch)
		for i, k := 0, 0; i < len(vals); k++ {
			n := min(sizes[k%len(sizes)], len(vals)-i)
			if !stage.Send(ctx, ch, append([]int(nil), vals[i:i+n]...)) {
				return nil
			}
			i += n
		}
		return nil
	})
	return ch
}

// TestUnorderedBatchesProperty: batches of any size in, every element is
// processed exactly once and comes out exactly once, never more than n at
// a time, and elements of one batch are spread over the workers (a batch
// of slow elements runs n at a time, not one worker's worth).
func TestUnorderedBatchesProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "n")
		total := rapid.IntRange(0, 300).Draw(rt, "total")
		sizes := rapid.SliceOfN(rapid.IntRange(1, 120), 1, 5).Draw(rt, "sizes")
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := stage.NewGroup(context.Background())
			var inFlight, most atomic.Int64
			calls := make([]atomic.Int64, total)
			f := func(ctx context.Context, v int) (int, error) {
				calls[v].Add(1)
				cur := inFlight.Add(1)
				for {
					m := most.Load()
					if cur <= m || most.CompareAndSwap(m, cur) {
						break
					}
				}
				time.Sleep(10 * time.Millisecond)
				inFlight.Add(-1)
				return v, nil
			}
			flow := ParallelMap(n, f).(stage.BatchFlow[int, int])
			out := flow.RunBatches(g, batches(g, seq(total), sizes))
			var got []int
			for b := range out {
				got = append(got, b...)
			}
			if err := g.Wait(); err != nil {
				rt.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, seq(total)) {
				rt.Fatalf("got %d results, want each of 0..%d once", len(got), total-1)
			}
			for v := range calls {
				if c := calls[v].Load(); c != 1 {
					rt.Fatalf("element %d processed %d times", v, c)
				}
			}
			if most.Load() > int64(n) {
				rt.Fatalf("%d calls at once with %d workers", most.Load(), n)
			}
			if want := int64(min(n, total)); sizes[0] >= total && most.Load() != want {
				rt.Fatalf("one batch of %d with %d workers ran at most %d at a time, want %d", total, n, most.Load(), want)
			}
		})
	})
}

// TestUnorderedBatchesHandsOnWhatIsReady: a slow element does not hold
// back the results of fast ones from the same batch.
func TestUnorderedBatchesHandsOnWhatIsReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := stage.NewGroup(context.Background())
		f := func(ctx context.Context, v int) (int, error) {
			if v == 0 {
				time.Sleep(time.Hour)
			}
			return v, nil
		}
		in := make(chan []int, 1)
		in <- seq(10)
		out := ParallelMap(2, f).(stage.BatchFlow[int, int]).RunBatches(g, in)
		got := 0
		start := time.Now()
		for got < 9 {
			got += len(<-out)
		}
		if waited := time.Since(start); waited > time.Second {
			t.Fatalf("the 9 fast results took %v: held back by the slow one", waited)
		}
		close(in)
		g.Cancel()
		for range out {
		}
		_ = g.Wait()
	})
}
