package flow

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// produce sends n messages of the given size, each bound to s, and counts
// the sends the gate took.
func produce(g *stage.Group, n, size int, s message.Settler, sent *atomic.Int64) <-chan *message.Message {
	in := make(chan *message.Message)
	g.Go(func(ctx context.Context) error {
		defer close(in)
		for i := range n {
			m := newMsg(i, size)
			message.Bind(m, s)
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
		fc := NewFlowControl(limit, 0)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		var sent atomic.Int64
		out := FlowGate(fc).Run(g, produce(g, 100, 10, rel, &sent))

		processing := <-out // the one "mapAsync(1)" holds forever
		synctest.Wait()
		if got := fc.Outstanding(); got != limit {
			t.Fatalf("Outstanding = %d, want %d (a gate counting only what downstream took)", got, limit)
		}
		if got := sent.Load(); got != limit {
			t.Fatalf("the gate received %d messages, want it to stop at %d", got, limit)
		}
		if got := fc.Waiting(); got != 0 {
			t.Fatalf("Waiting = %d, want 0: a full budget stops reception before Admit", got)
		}
		if got := fc.Buffered(); got != limit-2 {
			t.Fatalf("Buffered = %d, want %d (4 held, one of them on offer)", got, limit-2)
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
		if st.Outstanding != 0 || st.Acquired != st.Released || st.Buffered != 0 {
			t.Fatalf("after shutdown: %+v (the buffered messages must be nacked and released)", st)
		}
		if got := rel.count(); got != limit+1 {
			t.Fatalf("settled %d messages, want %d (1 acked, %d nacked on shutdown)", got, limit+1, limit)
		}
	})
}

// TestGateWaitsForBytes: a message that does not fit the byte budget waits,
// counted as Waiting, and is admitted by the release that makes room.
func TestGateWaitsForBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(0, 100)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		var sent atomic.Int64
		out := FlowGate(fc).Run(g, produce(g, 10, 60, rel, &sent))
		first := <-out
		synctest.Wait()
		if o, w, s := fc.Outstanding(), fc.Waiting(), sent.Load(); o != 1 || w != 1 || s != 2 {
			t.Fatalf("Outstanding, Waiting, received = %d, %d, %d; want 1, 1, 2", o, w, s)
		}
		first.Ack()
		second := <-out
		synctest.Wait()
		if o, w := fc.Outstanding(), fc.Waiting(); o != 1 || w != 1 {
			t.Fatalf("after the release: Outstanding, Waiting = %d, %d; want 1, 1", o, w)
		}
		second.Nack()
		g.Cancel()
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Waiting != 0 || st.Acquired != st.Released {
			t.Fatalf("after shutdown: %+v", st)
		}
	})
}

// TestGateOversizeMessage: a message larger than the byte budget passes
// when nothing else is outstanding, instead of blocking the gate forever.
func TestGateOversizeMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(10, 100)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		var sent atomic.Int64
		out := FlowGate(fc).Run(g, produce(g, 3, 1000, rel, &sent))
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
// while it waits in the gate's buffer releases its permit once, through
// its settle path (or through the gate when it has none), and is dropped
// instead of emitted. (The head of the buffer, once offered downstream, is
// emitted even if settled meanwhile; its later outcomes are no-ops.)
func TestGateSettledWhileBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(3, 0)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		in := make(chan *message.Message, 3)
		ms := make([]*message.Message, 3)
		for i := range ms {
			ms[i] = newMsg(i, 10)
			if i != 2 {
				message.Bind(ms[i], rel) // ms[2] has no settle path at all
			}
			in <- ms[i]
		}
		close(in)
		out := FlowGate(fc).Run(g, in)
		synctest.Wait()
		if got := fc.Outstanding(); got != 3 {
			t.Fatalf("Outstanding = %d, want 3", got)
		}
		message.Settle(ms[1], message.Expired, 0)
		if got := fc.Outstanding(); got != 2 {
			t.Fatalf("Outstanding = %d after an expiry, want 2", got)
		}
		ms[2].NoOp() // no settle path: the gate releases it when it skips it
		var got []*message.Message
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
		if rel.count() != 2 {
			t.Fatalf("settle path ran %d times, want 2", rel.count())
		}
	})
}

// TestGateSettledBeforeAdmission: a message settled while it waits for a
// permit never takes one.
func TestGateSettledBeforeAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(0, 100)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		in := make(chan *message.Message, 2)
		a, b := newMsg(1, 80), newMsg(2, 80)
		message.Bind(a, rel)
		message.Bind(b, rel)
		in <- a
		in <- b
		close(in)
		out := FlowGate(fc).Run(g, in)
		synctest.Wait()
		if fc.Waiting() != 1 || !fc.Holds(a) || fc.Holds(b) {
			t.Fatalf("want a admitted and b waiting: %+v", fc.Stats())
		}
		message.Settle(b, message.Expired, 0) // releases nothing: b holds nothing
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
		if st := fc.Stats(); st.Outstanding != 0 || st.Waiting != 0 || st.Acquired != 1 || st.Released != 1 {
			t.Fatalf("Stats = %+v", st)
		}
	})
}

// TestGatesShareBudget: two gates on one FlowControl never hold more than
// its limit together, and one release wakes both.
func TestGatesShareBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4
		fc := NewFlowControl(limit, 0)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		var sentA, sentB atomic.Int64
		outA := FlowGate(fc).Run(g, produce(g, 50, 1, rel, &sentA))
		outB := FlowGate(fc).Run(g, produce(g, 50, 1, rel, &sentB))
		synctest.Wait()
		// Both gates may see room for the last permit; the loser holds its
		// message as Waiting (received = Outstanding + Waiting, exactly).
		if got := sentA.Load() + sentB.Load(); fc.Outstanding() != limit || got != limit+fc.Waiting() || fc.Waiting() > 1 {
			t.Fatalf("two gates received %d, Outstanding %d, Waiting %d; want %d outstanding", got, fc.Outstanding(), fc.Waiting(), limit)
		}
		// Drain both: every release lets exactly one more in.
		for outA != nil || outB != nil {
			var m *message.Message
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

// TestGateDiscard: closing Discard nacks what the gate holds and releases
// the permits, and what arrives later too.
func TestGateDiscard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(5, 0)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		discard := make(chan struct{})
		var nacked atomic.Int64
		gate := &Gate{Flow: fc, Discard: discard, OnDrop: func(m *message.Message) {
			if m.Nack() {
				nacked.Add(1)
			}
		}}
		var sent atomic.Int64
		out := gate.Run(g, produce(g, 20, 1, rel, &sent))
		synctest.Wait()
		if fc.Outstanding() != 5 {
			t.Fatalf("Outstanding = %d", fc.Outstanding())
		}
		close(discard)
		for range out {
			t.Fatal("a discarding gate emitted")
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if got := nacked.Load(); got != 20 {
			t.Fatalf("nacked %d, want all 20", got)
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Acquired != st.Released {
			t.Fatalf("Stats = %+v", st)
		}
	})
}
