package operators

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	gsflow "github.com/reugn/go-streams/flow"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// elem is a test element: its index in the input, a key and a size.
type elem struct {
	i, key, size int
	at           time.Time // when it was sent to the stage
}

// batchGen draws options and an input.
type batchCase struct {
	opt   BatchOptions[*elem]
	elems []*elem
	gaps  []time.Duration // virtual time before each send
	keyed bool
}

func drawBatchCase(rt *rapid.T, ordered bool) batchCase {
	var c batchCase
	c.opt.Size = rapid.IntRange(1, 12).Draw(rt, "size")
	if rapid.Bool().Draw(rt, "bytes") {
		c.opt.Bytes = rapid.IntRange(1, 60).Draw(rt, "maxBytes")
		c.opt.SizeOf = func(e *elem) int { return e.size }
	}
	c.opt.Wait = time.Duration(rapid.IntRange(1, 50).Draw(rt, "waitMs")) * time.Millisecond
	c.opt.MaxOpen = rapid.IntRange(1, 6).Draw(rt, "maxOpen")
	c.opt.MaxWaiting = rapid.IntRange(1, 5).Draw(rt, "maxWaiting")
	c.opt.Ordered = ordered
	c.keyed = rapid.Bool().Draw(rt, "keyed")
	if c.keyed {
		c.opt.Key = func(e *elem) string { return fmt.Sprint(e.key) }
	}
	keys := rapid.IntRange(1, 8).Draw(rt, "keys")
	n := rapid.IntRange(0, 150).Draw(rt, "n")
	for i := range n {
		c.elems = append(c.elems, &elem{
			i:    i,
			key:  rapid.IntRange(0, keys-1).Draw(rt, "key"),
			size: rapid.IntRange(0, 80).Draw(rt, "elemSize"),
		})
		c.gaps = append(c.gaps, time.Duration(rapid.IntRange(0, 60).Draw(rt, "gapMs"))*time.Millisecond*time.Duration(rapid.IntRange(0, 1).Draw(rt, "pause")))
	}
	return c
}

// feed sends c's elements with their gaps, stamping each when taken.
func feed(g *stage.Group, c batchCase) <-chan *elem {
	ch := make(chan *elem)
	g.Go(func(ctx context.Context) error {
		defer close(ch)
		for i, e := range c.elems {
			time.Sleep(c.gaps[i])
			// Stamped before the send: the stage takes it at once in
			// virtual time (it never stalls for long with a prompt consumer).
			e.at = time.Now()
			if !stage.Send(ctx, ch, e) {
				return nil
			}
		}
		return nil
	})
	return ch
}

// checkBatches checks what every mode promises: each element in exactly
// one batch, input order per key (per batch key when keyed, else overall),
// one key per batch when keyed, and the Size and Bytes limits.
func checkBatches(rt *rapid.T, c batchCase, got [][]*elem) {
	seen := make([]int, len(c.elems))
	last := map[int]int{}
	for _, b := range got {
		if len(b) == 0 {
			rt.Fatalf("empty batch")
		}
		if len(b) > c.opt.Size {
			rt.Fatalf("batch of %d elements, Size %d", len(b), c.opt.Size)
		}
		bytes := 0
		for _, e := range b {
			bytes += e.size
			seen[e.i]++
			k := 0
			if c.keyed {
				k = e.key
				if e.key != b[0].key {
					rt.Fatalf("batch mixes keys %d and %d", b[0].key, e.key)
				}
			}
			if p, ok := last[k]; ok && p > e.i {
				rt.Fatalf("key %d: element %d after %d", k, e.i, p)
			}
			last[k] = e.i
		}
		if c.opt.Bytes > 0 && bytes > c.opt.Bytes && len(b) > 1 {
			rt.Fatalf("batch of %d elements and %d bytes, Bytes %d", len(b), bytes, c.opt.Bytes)
		}
	}
	for i, n := range seen {
		if n != 1 {
			rt.Fatalf("element %d in %d batches", i, n)
		}
	}
}

// TestBatchProperty: with a prompt consumer, every element is in exactly
// one batch, in input order per key, no batch exceeds Size or Bytes (but
// for a single larger element), no element waits more than Wait after
// the stage took it, the open batches never exceed MaxOpen and the closed
// ones waiting never exceed MaxOpen + MaxWaiting + 2.
func TestBatchProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := drawBatchCase(rt, false)
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := stage.NewGroup(context.Background())
			b := Batch(c.opt)
			var bound error
			b.observe = func(open, waiting int) {
				if bound == nil && (open > c.opt.MaxOpen || waiting > c.opt.MaxOpen+c.opt.MaxWaiting+2) {
					bound = fmt.Errorf("%d open (max %d), %d waiting (max %d)", open, c.opt.MaxOpen, waiting, c.opt.MaxWaiting)
				}
			}
			var got [][]*elem
			for batch := range b.Run(g, feed(g, c)) {
				for _, e := range batch {
					if waited := time.Since(e.at); waited > c.opt.Wait {
						rt.Fatalf("element %d emitted %v after it arrived, Wait %v", e.i, waited, c.opt.Wait)
					}
				}
				got = append(got, batch)
			}
			if err := g.Wait(); err != nil {
				rt.Fatal(err)
			}
			if bound != nil {
				rt.Fatal(bound)
			}
			checkBatches(rt, c, got)
		})
	})
}

// TestBatchChunkedProperty: the chunked path (RunBatches) makes batches
// with the same guarantees, one per chunk out, whatever the chunking in,
// with a slow consumer (backpressure).
func TestBatchChunkedProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := drawBatchCase(rt, false)
		sizes := rapid.SliceOfN(rapid.IntRange(1, 40), 1, 4).Draw(rt, "chunks")
		slow := time.Duration(rapid.IntRange(0, 30).Draw(rt, "slowMs")) * time.Millisecond
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := stage.NewGroup(context.Background())
			in := make(chan []*elem)
			g.Go(func(ctx context.Context) error {
				defer close(in)
				for i, k := 0, 0; i < len(c.elems); k++ {
					n := min(sizes[k%len(sizes)], len(c.elems)-i)
					if !stage.Send(ctx, in, slices.Clone(c.elems[i:i+n])) {
						return nil
					}
					i += n
				}
				return nil
			})
			var got [][]*elem
			for chunk := range Batch(c.opt).RunBatches(g, in) {
				if len(chunk) != 1 {
					rt.Fatalf("a chunk of %d batches, want 1", len(chunk))
				}
				got = append(got, chunk[0])
				time.Sleep(slow)
			}
			if err := g.Wait(); err != nil {
				rt.Fatal(err)
			}
			checkBatches(rt, c, got)
		})
	})
}

// TestBatchIdleFlushesAtOnce: once upstream says it has no more for now,
// and everything it sent has arrived, every open batch is emitted without
// any virtual time passing, although Wait is an hour; before that, none is.
func TestBatchIdleFlushesAtOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 60).Draw(rt, "n")
		keys := rapid.IntRange(1, 5).Draw(rt, "keys")
		size := rapid.IntRange(1, 80).Draw(rt, "size")
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := stage.NewGroup(context.Background())
			var spent atomic.Bool // the budget: spent before the last element is sent
			in := make(chan int)
			g.Go(func(ctx context.Context) error {
				defer close(in)
				for i := range n {
					if i == n-1 {
						spent.Store(true)
					}
					if !stage.Send(ctx, in, i) {
						return nil
					}
				}
				<-ctx.Done() // no more for now, and the input stays open
				return nil
			})
			b := Batch(BatchOptions[int]{
				Size: size, Wait: time.Hour,
				Key:  func(i int) string { return fmt.Sprint(i % keys) },
				Idle: func(received uint64) bool { return spent.Load() && received == uint64(n) },
			})
			out := b.Run(g, in)
			start := time.Now()
			count, partial := 0, 0
			for count < n {
				batch := <-out
				if time.Since(start) != 0 {
					rt.Fatalf("a batch came after %v: Idle did not flush at once", time.Since(start))
				}
				if len(batch) < size {
					partial++ // only the flush makes them: one per key at most
				}
				count += len(batch)
			}
			if partial > keys {
				rt.Fatalf("%d batches below Size for %d keys: flushed before the input went idle", partial, keys)
			}
			g.Cancel()
			for range out {
			}
			_ = g.Wait()
		})
	})
}

// TestBatchIdleWaitsForWhatWasSent: Idle's count keeps a batch open while
// an element upstream sent is still on its way.
func TestBatchIdleWaitsForWhatWasSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := stage.NewGroup(context.Background())
		in := make(chan int)
		b := Batch(BatchOptions[int]{Size: 10, Wait: time.Hour, Idle: func(received uint64) bool { return received == 3 }})
		out := b.Run(g, in)
		in <- 1
		in <- 2
		synctest.Wait()
		select {
		case batch := <-out:
			t.Fatalf("emitted %v with an element still to come", batch)
		default:
		}
		in <- 3
		if batch := <-out; !slices.Equal(batch, []int{1, 2, 3}) {
			t.Fatalf("got %v", batch)
		}
		close(in)
		for range out {
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBatchOrderedProperty: in Ordered mode a key never has two batches in
// flight (emitted and not released), whatever the consumers' timing; every
// element still arrives once, in order per key, within the limits.
func TestBatchOrderedProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := drawBatchCase(rt, true)
		workers := rapid.IntRange(1, 4).Draw(rt, "workers")
		delays := rapid.SliceOfN(rapid.IntRange(0, 40), 1, 20).Draw(rt, "delaysMs")
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := stage.NewGroup(context.Background())
			b := Batch(c.opt)
			out := b.Run(g, feed(g, c))
			var (
				mu       sync.Mutex
				got      [][]*elem
				inFlight = map[int]bool{}
				overlap  error
				handled  int
			)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for batch := range out {
						k := 0
						if c.keyed {
							k = batch[0].key
						}
						mu.Lock()
						if inFlight[k] && overlap == nil {
							overlap = fmt.Errorf("key %d: two batches in flight", k)
						}
						inFlight[k] = true
						got = append(got, batch)
						handled++
						d := delays[(handled+w)%len(delays)]
						mu.Unlock()
						time.Sleep(time.Duration(d) * time.Millisecond)
						mu.Lock()
						inFlight[k] = false
						mu.Unlock()
						b.Release(batch)
						b.Release(batch) // a second release changes nothing
					}
				})
			}
			wg.Wait()
			if err := g.Wait(); err != nil {
				rt.Fatal(err)
			}
			if overlap != nil {
				rt.Fatal(overlap)
			}
			// Per key, the order of emission is input order.
			checkBatches(rt, c, got)
		})
	})
}

// TestBatchOrderedHoldsKeyUntilRelease: a key's second batch waits for the
// first's release while other keys go on.
func TestBatchOrderedHoldsKeyUntilRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := stage.NewGroup(context.Background())
		b := Batch(BatchOptions[string]{Size: 2, Ordered: true, Key: func(s string) string { return s[:1] }})
		out := b.Run(g, pipeline.Slice("a1", "a2", "a3", "a4", "b1", "b2").Run(g))
		first := <-out
		second := <-out
		if !slices.Equal(first, []string{"a1", "a2"}) || !slices.Equal(second, []string{"b1", "b2"}) {
			t.Fatalf("got %v then %v, want a's first batch then b's", first, second)
		}
		synctest.Wait()
		select {
		case batch := <-out:
			t.Fatalf("%v emitted before a's first batch was released", batch)
		default:
		}
		b.Release(first)
		if got := <-out; !slices.Equal(got, []string{"a3", "a4"}) {
			t.Fatalf("after release got %v", got)
		}
		if _, open := <-out; open {
			t.Fatal("more batches")
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBatchOrderedKeyFreesOtherKeys: with OrderedKey, only the keys it
// names wait for a release; the batches of the others go unreleased.
func TestBatchOrderedKeyFreesOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := stage.NewGroup(context.Background())
		b := Batch(BatchOptions[string]{Size: 2, Ordered: true, Key: func(s string) string { return s[:1] },
			OrderedKey: func(k string) bool { return k == "a" }})
		out := b.Run(g, pipeline.Slice("a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4", "b5", "b6").Run(g))
		var got [][]string
		for range 4 { // a's first, then b's three, none released
			got = append(got, <-out)
		}
		want := [][]string{{"a1", "a2"}, {"b1", "b2"}, {"b3", "b4"}, {"b5", "b6"}}
		if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Fatalf("got %v, want %v", got, want)
		}
		synctest.Wait()
		select {
		case batch := <-out:
			t.Fatalf("%v emitted before a's first batch was released", batch)
		default:
		}
		b.Release(got[1]) // a free key's batch: ignored
		b.Release(got[0])
		if next := <-out; !slices.Equal(next, []string{"a3", "a4"}) {
			t.Fatalf("after release got %v", next)
		}
		if _, open := <-out; open {
			t.Fatal("more batches")
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBatchCancelMidBatch: cancelled with open batches, closed batches
// waiting and a consumer that stopped reading, the stage ends and leaves
// no goroutine.
func TestBatchCancelMidBatch(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			g := stage.NewGroup(ctx)
			in := make(chan int)
			chunks := make(chan []int)
			b := Batch(BatchOptions[int]{Size: 3, Wait: time.Minute, Ordered: ordered, Key: func(i int) string { return fmt.Sprint(i % 4) }})
			out := b.Run(g, in)
			outN := Batch(BatchOptions[int]{Size: 3}).RunBatches(g, chunks)
			for i := range 10 {
				in <- i
			}
			chunks <- []int{1, 2, 3, 4, 5, 6, 7}
			<-out // one taken, others held
			cancel()
			for range out {
			}
			for range outN {
			}
			if err := g.Wait(); !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait: %v", err)
			}
		})
		goleak.VerifyNone(t)
	}
}

func TestBatchBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  BatchOptions[int]
		want string
	}{
		{BatchOptions[int]{Size: -1}, "BatchOptions.Size"},
		{BatchOptions[int]{Bytes: -5}, "BatchOptions.Bytes"},
		{BatchOptions[int]{Bytes: 10}, "BatchOptions.SizeOf"},
		{BatchOptions[int]{Wait: -time.Second}, "BatchOptions.Wait"},
		{BatchOptions[int]{MaxOpen: -1}, "BatchOptions.MaxOpen"},
		{BatchOptions[int]{MaxWaiting: -2}, "BatchOptions.MaxWaiting"},
	} {
		if err := tc.opt.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.opt, err, tc.want)
		}
		g := stage.NewGroup(context.Background())
		out := Batch(tc.opt).Run(g, pipeline.Slice(1, 2).Run(g))
		for range out {
		}
		if err := g.Wait(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run with %+v: %v, want an error naming %s", tc.opt, err, tc.want)
		}
	}
	if err := (BatchOptions[int]{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	// A negative size from SizeOf fails the stage.
	g := stage.NewGroup(context.Background())
	out := Batch(BatchOptions[int]{Bytes: 10, SizeOf: func(int) int { return -1 }}).Run(g, pipeline.Slice(1).Run(g))
	for range out {
	}
	if err := g.Wait(); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative SizeOf: %v", err)
	}
	// Two Ordered runs of one Batch at once: the second fails.
	g = stage.NewGroup(context.Background())
	b := Batch(BatchOptions[int]{Ordered: true})
	hold := make(chan int)
	out1 := b.Run(g, hold)
	out2 := b.Run(g, pipeline.Slice(1).Run(g))
	for range out2 {
	}
	close(hold)
	for range out1 {
	}
	if err := g.Wait(); err == nil || !strings.Contains(err.Error(), "Ordered") {
		t.Errorf("second Ordered run: %v", err)
	}
}

// TestBatchOversizeElementAlone: an element larger than Bytes goes alone
// and the batch before it is not held back for it.
func TestBatchOversizeElementAlone(t *testing.T) {
	g := stage.NewGroup(context.Background())
	sizes := []int{3, 3, 50, 2, 2, 2}
	b := Batch(BatchOptions[int]{Bytes: 8, SizeOf: func(i int) int { return sizes[i] }})
	var got [][]int
	for batch := range b.Run(g, pipeline.Slice(0, 1, 2, 3, 4, 5).Run(g)) {
		got = append(got, batch)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[[0 1] [2] [3 4 5]]" {
		t.Fatalf("got %v", got)
	}
}

// TestBatchInsideGoStreams: Batch sits in a go-streams graph like any stage.
func TestBatchInsideGoStreams(t *testing.T) {
	g := stage.NewGroup(context.Background())
	var got [][]int
	sink := pipeline.NewStreamsSink(g, pipeline.ForEach(func(_ context.Context, b []int) error { got = append(got, b); return nil }))
	pipeline.NewStreamsSource(g, pipeline.Slice(1, 2, 3, 4, 5, 6, 7)).
		Via(gsflow.NewFilter(func(v int) bool { return v != 4 }, 1)).
		Via(pipeline.NewStreamsFlow(g, stage.Flow[int, []int](Batch(BatchOptions[int]{Size: 4})))).
		To(sink)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[[1 2 3 5] [6 7]]" {
		t.Fatalf("got %v", got)
	}
}

// TestBatchInPipeline: pipeline.Map runs Batch like any flow.
func TestBatchInPipeline(t *testing.T) {
	var got [][]int
	err := pipeline.Map(pipeline.From(pipeline.Slice(seq(25)...)), stage.Flow[int, []int](Batch(BatchOptions[int]{Size: 10}))).
		To(pipeline.ForEach(func(_ context.Context, b []int) error { got = append(got, b); return nil }))
	if err != nil || len(got) != 3 || len(got[2]) != 5 {
		t.Fatalf("got %v, %v", got, err)
	}
}

func BenchmarkBatch(b *testing.B) {
	g := stage.NewGroup(context.Background())
	in := make(chan int)
	out := Batch(BatchOptions[int]{Size: 100}).Run(g, in)
	done := make(chan struct{})
	go func() {
		for range out {
		}
		close(done)
	}()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in <- i
	}
	close(in)
	<-done
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}
