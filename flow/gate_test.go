package flow

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// produce sends n messages of the given size, each held by s (which counts
// their settles), and counts the sends the gate took.
func produce(g *stage.Group, n, size int, s *settles, sent *atomic.Int64) <-chan *source.Message {
	in := make(chan *source.Message)
	g.Go(func(ctx context.Context) error {
		defer close(in)
		for i := range n {
			m := s.hold(newMsg(i, size))
			select {
			case in <- m:
				sent.Add(1)
			case <-ctx.Done():
				return nil
			}
		}
		return nil
	})
	return in
}

// TestGateCountsOnReceipt: a gate that counted only what downstream took
// would hold more than its budget unaccounted. Limit 5, 100
// messages upstream, downstream takes one and blocks. The gate must count
// every message it received (5, not 1) and stop receiving at the limit.
func TestGateCountsOnReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 5
		fc := NewFlowControl(limit, Unlimited)
		set := newSettles()
		g := stage.NewGroup(t.Context())
		var sent atomic.Int64
		out := FlowGate(fc).Run(g, produce(g, 100, 10, set, &sent))

		processing := <-out // the one "mapAsync(1)" holds forever
		synctest.Wait()
		if got := fc.Outstanding(); got != limit {
			t.Fatalf("Outstanding = %d, want %d (a gate counting only what downstream took)", got, limit)
		}
		// A full budget stops reception before admission: nothing waits
		// for a permit.
		if got := sent.Load(); got != limit {
			t.Fatalf("the gate received %d messages, want it to stop at %d", got, limit)
		}

		// Settling the processing message frees exactly one permit.
		processing.Ack()
		synctest.Wait()
		if got, s := fc.Outstanding(), sent.Load(); got != limit || s != limit+1 {
			t.Fatalf("after one ack: Outstanding = %d, received = %d; want %d, %d", got, s, limit, limit+1)
		}

		g.Cancel()
		if err := g.Wait(); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		st := fc.Stats()
		if st.Outstanding != 0 || st.Acquired != st.Released || st.Acquired != limit+1 || st.ServerHeld != 0 {
			t.Fatalf("after shutdown: %+v (the buffered messages must be nacked and released)", st)
		}
		if got := set.count(); got != limit+1 {
			t.Fatalf("settled %d messages, want %d (1 acked, %d nacked on shutdown)", got, limit+1, limit)
		}
	})
}

// TestGateWaitsForBytes: a message that does not fit the byte budget waits
// for its permit (received, not counted, and the gate receives nothing
// more), and is admitted by the release that makes room.
func TestGateWaitsForBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(Unlimited, 100)
		set := newSettles()
		g := stage.NewGroup(t.Context())
		var sent atomic.Int64
		out := FlowGate(fc).Run(g, produce(g, 10, 60, set, &sent))
		first := <-out
		synctest.Wait()
		if o, b, s := fc.Outstanding(), fc.OutstandingBytes(), sent.Load(); o != 1 || b != 60 || s != 2 {
			t.Fatalf("Outstanding, bytes, received = %d, %d, %d; want 1, 60, 2 (one waiting)", o, b, s)
		}
		first.Ack()
		second := <-out
		synctest.Wait()
		if o, s := fc.Outstanding(), sent.Load(); o != 1 || s != 3 {
			t.Fatalf("after the release: Outstanding, received = %d, %d; want 1, 3 (one waiting)", o, s)
		}
		second.Nack()
		synctest.Wait() // the waiting one is admitted, the next one waits
		if o, s := fc.Outstanding(), sent.Load(); o != 1 || s != 4 {
			t.Fatalf("after the nack: Outstanding, received = %d, %d; want 1, 4", o, s)
		}
		g.Cancel()
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.OutstandingBytes != 0 || st.Acquired != st.Released || st.Acquired != 3 {
			t.Fatalf("after shutdown: %+v", st)
		}
		// The buffered one and the one waiting were dropped (nacked) too.
		if got := set.count(); got != 4 {
			t.Fatalf("settled %d, want 4", got)
		}
	})
}

// TestGateOversizeMessage: a message larger than the byte budget passes
// when nothing else is outstanding, instead of blocking the gate forever.
func TestGateOversizeMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(10, 100)
		g := stage.NewGroup(t.Context())
		var sent atomic.Int64
		out := FlowGate(fc).Run(g, produce(g, 3, 1000, newSettles(), &sent))
		for i := range 3 {
			m := <-out
			synctest.Wait()
			if o, b := fc.Outstanding(), fc.OutstandingBytes(); o != 1 || b != 1000 {
				t.Fatalf("message %d: Outstanding %d, bytes %d; want one oversize message alone", i, o, b)
			}
			m.Ack()
		}
		if _, ok := <-out; ok {
			t.Fatal("more output than input")
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Acquired != 3 || st.Released != 3 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

// TestGateSettledWhileBuffered: a message settled (say its lease expired)
// while it waits in the gate's buffer releases its permit once, at once,
// through its settle path, and is dropped instead of emitted. (The head of
// the buffer, once offered downstream, is emitted even if settled
// meanwhile; its later outcomes are no-ops.)
func TestGateSettledWhileBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(3, Unlimited)
		set := newSettles()
		g := stage.NewGroup(t.Context())
		in := make(chan *source.Message, 3)
		ms := make([]*source.Message, 3)
		for i := range ms {
			ms[i] = set.hold(newMsg(i, 10))
			in <- ms[i]
		}
		close(in)
		out := FlowGate(fc).Run(g, in)
		synctest.Wait()
		if got := fc.Outstanding(); got != 3 {
			t.Fatalf("Outstanding = %d, want 3", got)
		}
		message.Of(ms[1]).Settle(ms[1], message.Expired, 0)
		if got := fc.Outstanding(); got != 2 {
			t.Fatalf("Outstanding = %d after an expiry, want 2", got)
		}
		ms[2].NoOp()
		if got := fc.Outstanding(); got != 1 {
			t.Fatalf("Outstanding = %d after a no-op, want 1", got)
		}
		var got []*source.Message
		for m := range out {
			got = append(got, m)
		}
		if len(got) != 1 || got[0] != ms[0] {
			t.Fatalf("emitted %d messages, want only the unsettled one", len(got))
		}
		got[0].Ack()
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Acquired != 3 || st.Released != 3 {
			t.Fatalf("Stats = %+v, want 3 acquired and 3 released", st)
		}
		for i, m := range ms {
			if s, d := set.of(m); s != 1 || d != 1 {
				t.Fatalf("message %d settled %d times, done %d; want once each", i, s, d)
			}
		}
	})
}

// TestGateSettledBeforeAdmission: a message settled while it waits for a
// permit never takes one.
func TestGateSettledBeforeAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(Unlimited, 100)
		set := newSettles()
		g := stage.NewGroup(t.Context())
		in := make(chan *source.Message, 2)
		a, b := set.hold(newMsg(1, 80)), set.hold(newMsg(2, 80))
		in <- a
		in <- b
		close(in)
		out := FlowGate(fc).Run(g, in)
		synctest.Wait()
		if st := fc.Stats(); st.Outstanding != 1 || st.OutstandingBytes != 80 || st.Acquired != 1 {
			t.Fatalf("want a admitted and b waiting: %+v", st)
		}
		message.Of(b).Settle(b, message.Expired, 0) // releases nothing: b holds nothing
		if st := fc.Stats(); st.Outstanding != 1 || st.Released != 0 {
			t.Fatalf("b's expiry released a permit it never had: %+v", st)
		}
		if got := <-out; got != a {
			t.Fatal("first output is not a")
		}
		a.Ack() // wakes the gate, which finds b settled and drops it
		if _, ok := <-out; ok {
			t.Fatal("a settled message was emitted")
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Acquired != 1 || st.Released != 1 {
			t.Fatalf("Stats = %+v", st)
		}
		if set.count() != 2 {
			t.Fatalf("settled %d times, want 2", set.count())
		}
	})
}

// TestGatesShareBudget: two gates on one FlowControl never hold more than
// its limit together, and one release wakes both.
func TestGatesShareBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4
		fc := NewFlowControl(limit, Unlimited)
		set := newSettles()
		g := stage.NewGroup(t.Context())
		var sentA, sentB atomic.Int64
		outA := FlowGate(fc).Run(g, produce(g, 50, 1, set, &sentA))
		outB := FlowGate(fc).Run(g, produce(g, 50, 1, set, &sentB))
		synctest.Wait()
		// Both gates may see room for the last permit; the loser holds its
		// message, waiting for a permit: received = Outstanding + at most
		// one waiting.
		if got, o := sentA.Load()+sentB.Load(), fc.Outstanding(); o != limit || got < o || got > o+1 {
			t.Fatalf("two gates received %d, Outstanding %d; want %d outstanding and at most one waiting", got, o, limit)
		}
		// Drain both: every release lets exactly one more in.
		for outA != nil || outB != nil {
			var m *source.Message
			var ok bool
			select {
			case m, ok = <-outA:
				if !ok {
					outA = nil
					continue
				}
			case m, ok = <-outB:
				if !ok {
					outB = nil
					continue
				}
			}
			if o := fc.Outstanding(); o > limit {
				t.Fatalf("Outstanding %d > %d", o, limit)
			}
			m.Ack()
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Acquired != 100 || st.Released != 100 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}
