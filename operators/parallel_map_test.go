package operators

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

func source(g *stage.Group, vals []int) <-chan int {
	ch := make(chan int)
	g.Go(func(ctx context.Context) error {
		defer close(ch)
		for _, v := range vals {
			select {
			case ch <- v:
			case <-ctx.Done():
				return nil
			}
		}
		return nil
	})
	return ch
}

func collect[R any](g *stage.Group, out <-chan R) ([]R, error) {
	var got []R
	for r := range out {
		got = append(got, r)
	}
	return got, g.Wait()
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestOrderedKeepsOrder: random per-element delays (virtual time) never
// reorder the output, and the window bound holds.
func TestOrderedKeepsOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "n")
		window := rapid.IntRange(0, 16).Draw(rt, "window")
		delays := rapid.SliceOf(rapid.IntRange(0, 50)).Draw(rt, "delays")
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := stage.NewGroup(context.Background())
			var inFlight, maxInFlight atomic.Int64
			f := func(ctx context.Context, i int) (int, error) {
				maxInFlight.Store(max(maxInFlight.Load(), inFlight.Add(1)))
				defer inFlight.Add(-1)
				time.Sleep(time.Duration(delays[i]) * time.Millisecond)
				return i * 10, nil
			}
			pm := ParallelMap(n, f, Options[int, int]{Mode: Ordered, Window: window})
			got, err := collect(g, pm.Run(g, source(g, seq(len(delays)))))
			if err != nil {
				rt.Fatal(err)
			}
			if len(got) != len(delays) {
				rt.Fatalf("got %d results, want %d", len(got), len(delays))
			}
			for i, r := range got {
				if r != i*10 {
					rt.Fatalf("result %d = %d: out of order", i, r)
				}
			}
			if m := maxInFlight.Load(); m > int64(n) {
				rt.Fatalf("%d calls at once with n=%d", m, n)
			}
		})
	})
}

// TestUnorderedReachesN counts (does not time) concurrent calls: with n
// workers and blocked functions, exactly n run at once.
func TestUnorderedReachesN(t *testing.T) {
	for _, n := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := stage.NewGroup(context.Background())
				release := make(chan struct{})
				var running atomic.Int64
				f := func(ctx context.Context, i int) (int, error) {
					running.Add(1)
					<-release
					return i, nil
				}
				out := ParallelMap(n, f).Run(g, source(g, seq(3*n)))
				synctest.Wait()
				if got := running.Load(); got != int64(n) {
					t.Fatalf("%d calls running, want %d", got, n)
				}
				close(release)
				got, err := collect(g, out)
				if err != nil || len(got) != 3*n {
					t.Fatalf("got %d results, err %v", len(got), err)
				}
			})
		})
	}
}

// TestKeyedSequentialPerKey: random keys and delays; no two elements of a
// key ever run at once, per-key output order is input order, different keys
// do run in parallel.
func TestKeyedSequentialPerKey(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "n")
		keys := rapid.SliceOf(rapid.IntRange(0, 4)).Draw(rt, "keys")
		delays := rapid.SliceOfN(rapid.IntRange(0, 20), len(keys), len(keys)).Draw(rt, "delays")
		window := rapid.IntRange(0, 8).Draw(rt, "window")
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := stage.NewGroup(context.Background())
			var mu sync.Mutex
			active := map[int]bool{}
			var violation error
			f := func(ctx context.Context, i int) (int, error) {
				k := keys[i]
				mu.Lock()
				if active[k] && violation == nil {
					violation = fmt.Errorf("key %d ran twice at once (element %d)", k, i)
				}
				active[k] = true
				mu.Unlock()
				time.Sleep(time.Duration(delays[i]) * time.Millisecond)
				mu.Lock()
				active[k] = false
				mu.Unlock()
				return i, nil
			}
			pm := ParallelMap(n, f, Options[int, int]{Mode: Keyed, Window: window, Key: func(i int) string { return fmt.Sprint(keys[i]) }})
			got, err := collect(g, pm.Run(g, source(g, seq(len(keys)))))
			if err != nil {
				rt.Fatal(err)
			}
			if violation != nil {
				rt.Fatal(violation)
			}
			if len(got) != len(keys) {
				rt.Fatalf("got %d of %d", len(got), len(keys))
			}
			last := map[int]int{}
			for _, i := range got {
				if prev, ok := last[keys[i]]; ok && prev > i {
					rt.Fatalf("key %d: element %d emitted after %d", keys[i], i, prev)
				}
				last[keys[i]] = i
			}
		})
	})
}

func TestKeyedRunsKeysInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := stage.NewGroup(context.Background())
		release := make(chan struct{})
		var running atomic.Int64
		f := func(ctx context.Context, i int) (int, error) {
			running.Add(1)
			<-release
			return i, nil
		}
		// keys 0,1,2,0,1,2: three distinct keys, four workers → three run.
		pm := ParallelMap(4, f, Options[int, int]{Mode: Keyed, Key: func(i int) string { return fmt.Sprint(i % 3) }})
		out := pm.Run(g, source(g, seq(6)))
		synctest.Wait()
		if got := running.Load(); got != 3 {
			t.Fatalf("%d running, want 3 (one per key)", got)
		}
		close(release)
		if got, err := collect(g, out); err != nil || len(got) != 6 {
			t.Fatalf("got %v, %v", got, err)
		}
	})
}

func TestPanicBecomesError(t *testing.T) {
	for _, mode := range []Mode{Unordered, Ordered, Keyed} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			g := stage.NewGroup(context.Background())
			f := func(ctx context.Context, i int) (int, error) {
				if i == 2 {
					panic("bad element")
				}
				return i, nil
			}
			pm := ParallelMap(2, f, Options[int, int]{Mode: mode, Key: func(i int) string { return "k" }})
			_, err := collect(g, pm.Run(g, source(g, seq(5))))
			var pe *stage.PanicError
			if !errors.As(err, &pe) || pe.Value != "bad element" {
				t.Fatalf("err = %v, want stage.PanicError", err)
			}
		})
	}
}

func TestOnErrorKeepsGoing(t *testing.T) {
	g := stage.NewGroup(context.Background())
	f := func(ctx context.Context, i int) (int, error) {
		if i%2 == 1 {
			panic("odd")
		}
		return i, nil
	}
	var errs atomic.Int64
	pm := ParallelMap(3, f, Options[int, int]{Mode: Ordered, OnError: func(v int, err error) (int, bool) {
		errs.Add(1)
		return -v, true
	}})
	got, err := collect(g, pm.Run(g, source(g, seq(6))))
	if err != nil || errs.Load() != 3 || len(got) != 6 || got[1] != -1 {
		t.Fatalf("got %v err %v errs %d", got, err, errs.Load())
	}
}

func TestCancelLeavesNoGoroutine(t *testing.T) {
	for _, mode := range []Mode{Unordered, Ordered, Keyed} {
		ctx, cancel := context.WithCancel(context.Background())
		g := stage.NewGroup(ctx)
		f := func(ctx context.Context, i int) (int, error) {
			<-ctx.Done()
			return i, nil
		}
		pm := ParallelMap(4, f, Options[int, int]{Mode: mode, Key: func(i int) string { return fmt.Sprint(i) }})
		out := pm.Run(g, source(g, seq(100)))
		cancel()
		if _, err := collect(g, out); !errors.Is(err, context.Canceled) {
			t.Fatalf("mode %d: err = %v", mode, err)
		}
	}
}

func benchmarkParallelMap(b *testing.B, mode Mode) {
	g := stage.NewGroup(context.Background())
	in := make(chan int)
	f := func(ctx context.Context, i int) (int, error) { return i, nil }
	out := ParallelMap(4, f, Options[int, int]{Mode: mode, Key: func(i int) string { return "k" }}).Run(g, in)
	done := make(chan struct{})
	go func() {
		for range out {
		}
		close(done)
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in <- i
	}
	close(in)
	<-done
	b.StopTimer()
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkParallelMapUnordered(b *testing.B) { benchmarkParallelMap(b, Unordered) }
func BenchmarkParallelMapOrdered(b *testing.B)   { benchmarkParallelMap(b, Ordered) }
func BenchmarkParallelMapKeyed(b *testing.B)     { benchmarkParallelMap(b, Keyed) }

// TestParallelMapOptionsOptional: without Options the map runs unordered
// with inferred types; two Options fail the group with an error saying so.
func TestParallelMapOptionsOptional(t *testing.T) {
	double := func(_ context.Context, v int) (int, error) { return 2 * v, nil }
	g := stage.NewGroup(context.Background())
	sum := 0
	for v := range ParallelMap(3, double).Run(g, pipeline.Slice(1, 2, 3).Run(g)) {
		sum += v
	}
	if err := g.Wait(); err != nil || sum != 12 {
		t.Fatalf("no options: sum %d, err %v; want 12, nil", sum, err)
	}
	g = stage.NewGroup(context.Background())
	for range ParallelMap(3, double, Options[int, int]{}, Options[int, int]{Mode: Ordered}).Run(g, pipeline.Slice(1).Run(g)) {
	}
	if err := g.Wait(); err == nil || !strings.Contains(err.Error(), "at most one Options") {
		t.Fatalf("two options: %v, want an error naming at most one Options", err)
	}
}
