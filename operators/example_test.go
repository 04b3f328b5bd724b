package operators_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Ordered mode: four workers, results in input order.
func ExampleParallelMap() {
	upper := operators.ParallelMap(4, func(_ context.Context, s string) (string, error) {
		return strings.ToUpper(s), nil
	}, operators.Options[string, string]{Mode: operators.Ordered})
	err := pipeline.Map(pipeline.From(pipeline.Slice("a", "b", "c", "d")), upper).
		To(pipeline.ForEach(func(_ context.Context, s string) error { fmt.Print(s); return nil }))
	fmt.Println("", err)
	// Output: ABCD <nil>
}

// Keyed mode: one element per key at a time, in arrival order per key.
func ExampleParallelMap_keyed() {
	type order struct{ customer, item string }
	pm := operators.ParallelMap(4, func(_ context.Context, o order) (order, error) { return o, nil },
		operators.Options[order, order]{Mode: operators.Keyed, Key: func(o order) string { return o.customer }})
	var alice []string
	err := pipeline.From(pipeline.Slice(order{"alice", "1"}, order{"bob", "1"}, order{"alice", "2"}, order{"alice", "3"})).
		Via(pm).
		To(pipeline.ForEach(func(_ context.Context, o order) error {
			if o.customer == "alice" {
				alice = append(alice, o.item)
			}
			return nil
		}))
	fmt.Println(alice, err)
	// Output: [1 2 3] <nil>
}

// OnError turns a failure into a result instead of failing the pipeline;
// a panic arrives there as a *PanicError.
func ExampleOptions() {
	var failed []string // OnError runs on the workers; one at a time here
	parse := operators.ParallelMap(1, func(_ context.Context, s string) (int, error) {
		if s == "boom" {
			panic("cannot parse")
		}
		return len(s), nil
	}, operators.Options[string, int]{
		Mode: operators.Ordered,
		OnError: func(s string, err error) (int, bool) {
			var pe *stage.PanicError
			failed = append(failed, fmt.Sprint(s, " panicked: ", errors.As(err, &pe)))
			return -1, true
		},
	})
	err := pipeline.Map(pipeline.From(pipeline.Slice("ab", "boom", "c")), parse).
		To(pipeline.ForEach(func(_ context.Context, n int) error { fmt.Print(n, " "); return nil }))
	fmt.Println(err, failed)
	// Output: 2 -1 1 <nil> [boom panicked: true]
}

// Batches of up to three; the input ending emits the last, partial one.
func ExampleBatch() {
	batches := operators.Batch(operators.BatchOptions[int]{Size: 3, Wait: time.Second})
	err := pipeline.Map(pipeline.From(pipeline.Slice(1, 2, 3, 4, 5, 6, 7)), stage.Flow[int, []int](batches)).
		To(pipeline.ForEach(func(_ context.Context, b []int) error { fmt.Print(b); return nil }))
	fmt.Println("", err)
	// Output: [1 2 3][4 5 6][7] <nil>
}

// One open batch per key, at most 10 bytes each (an element larger than
// that goes alone); in Ordered mode a key's next batch waits until the
// previous one is released, so one key's batches never overlap.
func ExampleBatch_ordered() {
	type row struct{ table, data string }
	batches := operators.Batch(operators.BatchOptions[row]{
		Bytes:   10,
		SizeOf:  func(r row) int { return len(r.data) },
		Key:     func(r row) string { return r.table },
		Ordered: true,
	})
	src := pipeline.Slice(row{"a", "1234"}, row{"b", "x"}, row{"a", "5678"}, row{"a", "90"}, row{"a", "a big row"})
	written := map[string][][]row{}
	err := pipeline.Map(pipeline.From(src), stage.Flow[row, []row](batches)).
		To(pipeline.ForEach(func(_ context.Context, b []row) error {
			written[b[0].table] = append(written[b[0].table], b) // "write" the batch
			batches.Release(b)                                   // the key's next batch may go
			return nil
		}))
	fmt.Println(written["a"], written["b"], err)
	// Output: [[{a 1234} {a 5678} {a 90}] [{a a big row}]] [[{b x}]] <nil>
}
