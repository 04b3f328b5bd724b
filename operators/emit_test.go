package operators

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/pubsubflow/pubsubflow/stage"
)

// TestParallelMapEmit: in every mode, results Emit rejects are dropped and
// the rest arrive (in order where the mode orders them); OnError's results
// are filtered too.
func TestParallelMapEmit(t *testing.T) {
	vals := make([]int, 200)
	for i := range vals {
		vals[i] = i
	}
	for _, mode := range []Mode{Unordered, Ordered, Keyed} {
		t.Run(strconv.Itoa(int(mode)), func(t *testing.T) {
			g := stage.NewGroup(context.Background())
			f := func(_ context.Context, v int) (int, error) {
				if v%10 == 9 {
					return 0, context.DeadlineExceeded // turned into -v by OnError
				}
				return v, nil
			}
			out := ParallelMap(4, f, Options[int, int]{
				Mode:    mode,
				Key:     func(v int) string { return strconv.Itoa(v % 3) },
				OnError: func(v int, _ error) (int, bool) { return -v, true },
				Emit:    func(r int) bool { return r%2 == 0 || r < 0 },
			}).Run(g, source(g, vals))
			got, err := collect(g, out)
			if err != nil {
				t.Fatal(err)
			}
			var want []int
			for _, v := range vals {
				switch {
				case v%10 == 9:
					want = append(want, -v)
				case v%2 == 0:
					want = append(want, v)
				}
			}
			if mode == Unordered {
				slices.Sort(got)
				slices.Sort(want)
			}
			if mode == Keyed {
				// Ordered per key only: compare as sets.
				slices.Sort(got)
				slices.Sort(want)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		})
	}
}
