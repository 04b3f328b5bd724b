package stage

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"
)

// feed sends 0..n-1 on an unbuffered channel under g, then closes it.
func feed(g *Group, n int) <-chan int {
	ch := make(chan int)
	g.Go(func(ctx context.Context) error {
		defer close(ch)
		for i := range n {
			select {
			case ch <- i:
			case <-ctx.Done():
				return nil
			}
		}
		return nil
	})
	return ch
}

// TestEagerProperties checks, in a synctest bubble so that "downstream is
// blocked and everything else has settled" is an exact moment:
//   - the on-receipt hook has run for min(total, consumed+bound) elements
//     whenever downstream pauses (tracking never waits for demand);
//   - the buffer never exceeds its bound;
//   - every element is emitted exactly once and in order, or dropped once on
//     cancellation, never both;
//   - every goroutine exits.
func TestEagerProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		total := rapid.IntRange(0, 300).Draw(rt, "total")
		bound := rapid.IntRange(1, 64).Draw(rt, "bound")
		pauses := rapid.SliceOfN(rapid.IntRange(0, 40), 0, 10).Draw(rt, "pauses")
		cancelAt := rapid.IntRange(-1, total).Draw(rt, "cancelAt")

		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := NewGroup(context.Background())
			received, maxBuf := 0, 0
			var dropped []int
			e := &Eager[int]{
				Bound:     bound,
				OnReceive: func(context.Context, int) error { received++; return nil },
				OnDrop:    func(v int) { dropped = append(dropped, v) },
				Observe:   func(n int) { maxBuf = max(maxBuf, n) },
			}
			out := e.Run(g, feed(g, total))

			consumed := 0
			checkPause := func() {
				synctest.Wait() // downstream blocked, everything else settled
				if want := min(total, consumed+bound); received != want {
					rt.Fatalf("after %d consumed, hook ran %d times, want %d", consumed, received, want)
				}
			}
			var emitted []int
			p := 0
		loop:
			for {
				if consumed == cancelAt {
					g.Cancel()
					break
				}
				if p < len(pauses) && consumed == pauses[p] {
					checkPause()
					p++
					continue
				}
				v, ok := <-out
				if !ok {
					break loop
				}
				emitted = append(emitted, v)
				consumed++
			}
			for v := range out { // a cancelled stage may still emit before it closes
				emitted = append(emitted, v)
			}
			if err := g.Wait(); err != nil && cancelAt < 0 {
				rt.Fatalf("Wait: %v", err)
			}
			if maxBuf > bound {
				rt.Fatalf("buffer reached %d, bound %d", maxBuf, bound)
			}
			for i, v := range emitted {
				if v != i {
					rt.Fatalf("emitted[%d] = %d: out of order or duplicated", i, v)
				}
			}
			for i, v := range dropped {
				if v != len(emitted)+i {
					rt.Fatalf("dropped %v after emitting %d: not the held elements", dropped, len(emitted))
				}
			}
			if len(emitted)+len(dropped) != received {
				rt.Fatalf("received %d, emitted %d, dropped %d", received, len(emitted), len(dropped))
			}
			if cancelAt < 0 && len(emitted) != total {
				rt.Fatalf("emitted %d of %d", len(emitted), total)
			}
		})
	})
}

func TestEagerHookErrorFailsGroup(t *testing.T) {
	boom := errors.New("boom")
	g := NewGroup(context.Background())
	var dropped []int
	e := &Eager[int]{
		OnReceive: func(_ context.Context, v int) error {
			if v == 3 {
				return boom
			}
			return nil
		},
		OnDrop: func(v int) { dropped = append(dropped, v) },
	}
	out := e.Run(g, feed(g, 10))
	for range out {
	}
	if err := g.Wait(); !errors.Is(err, boom) {
		t.Fatalf("Wait = %v, want boom", err)
	}
	if len(dropped) == 0 || dropped[0] != 3 {
		t.Fatalf("dropped %v, want the failing element first", dropped)
	}
}

// TestEagerRoomAndAdmit checks the external-budget hooks: the stage stops
// receiving while Room is false and holds one element while Admit refuses
// it, and resumes on Wake.
func TestEagerRoomAndAdmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(context.Background())
		budget := 2
		wake := make(chan struct{}, 1)
		received := 0
		e := &Eager[int]{
			Bound: 100,
			Admit: func(int) bool {
				if budget == 0 {
					return false
				}
				budget--
				return true
			},
			Wake:      func() <-chan struct{} { return wake },
			OnReceive: func(context.Context, int) error { received++; return nil },
		}
		out := e.Run(g, feed(g, 5))
		synctest.Wait()
		if received != 2 {
			t.Fatalf("received %d with budget 2", received)
		}
		budget = 3
		wake <- struct{}{}
		synctest.Wait()
		if received != 5 {
			t.Fatalf("received %d after refilling the budget", received)
		}
		n := 0
		for range out {
			n++
		}
		if n != 5 {
			t.Fatalf("emitted %d", n)
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestEagerDiscard checks graceful-shutdown discarding: buffered and later
// elements are dropped, none emitted, and the output closes when upstream does.
func TestEagerDiscard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(context.Background())
		discard := make(chan struct{})
		dropped := 0
		e := &Eager[int]{Bound: 4, Discard: discard, OnDrop: func(int) { dropped++ }}
		out := e.Run(g, feed(g, 20))
		<-out
		synctest.Wait()
		close(discard)
		for range out {
			t.Fatal("emitted after discard")
		}
		if dropped != 19 {
			t.Fatalf("dropped %d, want 19", dropped)
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

func BenchmarkEager(b *testing.B) {
	g := NewGroup(context.Background())
	in := make(chan int)
	e := &Eager[int]{Bound: 1000, OnReceive: func(context.Context, int) error { return nil }}
	out := e.Run(g, in)
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

// TestEagerReadyAndSkip: the head waits for Ready; skipped elements are
// removed without being emitted, and reception goes on meanwhile.
func TestEagerReadyAndSkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(context.Background())
		gate := make(chan struct{})
		open := false
		received := 0
		e := &Eager[int]{
			Bound: 10,
			Ready: func(int) <-chan struct{} {
				if open {
					return nil
				}
				return gate
			},
			Skip:      func(v int) bool { return v%2 == 1 },
			OnReceive: func(context.Context, int) error { received++; return nil },
		}
		out := e.Run(g, feed(g, 6))
		synctest.Wait()
		select {
		case v := <-out:
			t.Fatalf("emitted %d before ready", v)
		default:
		}
		if received != 6 {
			t.Fatalf("received %d while the head waited", received)
		}
		open = true
		close(gate)
		var got []int
		for v := range out {
			got = append(got, v)
		}
		if len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 4 {
			t.Fatalf("emitted %v, want [0 2 4]", got)
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRecvSend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan int, 1)
	if !Send(ctx, ch, 7) {
		t.Fatal("Send with room failed")
	}
	if v, ok := Recv(ctx, ch); !ok || v != 7 {
		t.Fatalf("Recv = %d, %v", v, ok)
	}
	cancel()
	if Send(ctx, ch, 8) && Send(ctx, ch, 9) {
		t.Fatal("Send on a full channel succeeded after cancel")
	}
	close(ch)
	for {
		if _, ok := Recv(ctx, ch); !ok {
			break
		}
	}
}

// TestOnDoneRunsLastFirst: hooks run in reverse order, so a hook that
// ends what an earlier one set up runs before it.
func TestOnDoneRunsLastFirst(t *testing.T) {
	g := NewGroup(context.Background())
	var order []int
	for i := range 3 {
		g.OnDone(func() { order = append(order, i) })
	}
	if err := g.Wait(); err != nil || fmt.Sprint(order) != "[2 1 0]" {
		t.Fatalf("Wait: %v, hooks ran %v, want [2 1 0]", err, order)
	}
}
