package message

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counting is a Holder that counts what it is told, and checks the order.
type counting struct {
	settled, done atomic.Int32
	bad           atomic.Bool
}

func (c *counting) Settled(any, uint32) {
	if c.settled.Add(1) != 1 || c.done.Load() != 0 {
		c.bad.Store(true)
	}
}

func (c *counting) Done(any, time.Time) {
	if c.done.Add(1) != 1 || c.settled.Load() != 1 {
		c.bad.Store(true)
	}
}

func (c *counting) check(t *testing.T, name string, settled, done int32) {
	t.Helper()
	if c.bad.Load() || c.settled.Load() != settled || c.done.Load() != done {
		t.Errorf("%s: settled %d done %d (out of order: %v), want %d and %d", name, c.settled.Load(), c.done.Load(), c.bad.Load(), settled, done)
	}
}

// TestReceiptStagesHolders: holders attached during a receipt join the
// list at EndReceipt, newest first after any attached before, and hear
// the settle and Done once.
func TestReceiptStagesHolders(t *testing.T) {
	var st State
	var before, a, b counting
	var nb, na, nbb HoldNode
	if !st.Hold(1, &nb, &before) {
		t.Fatal("Hold before the receipt failed")
	}
	st.BeginReceipt()
	st.Hold(1, &na, &a)
	st.Hold(1, &nbb, &b)
	if !st.HeldBefore(&nbb, func(h Holder) bool { return h == &a }) || st.HeldBefore(&na, func(h Holder) bool { return h == &b }) {
		t.Fatal("HeldBefore does not see the staged order")
	}
	n := 0
	st.Holders(func(Holder) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d holders listed during the receipt, want 1 (the staged ones are not attached yet)", n)
	}
	st.EndReceipt(1)
	var order []Holder
	st.Holders(func(h Holder) bool { order = append(order, h); return true })
	if len(order) != 3 || order[0] != &b || order[1] != &a || order[2] != &before {
		t.Fatalf("hold list %v after the receipt, want b, a, before", order)
	}
	if !st.Settle(1, Nack, 0) {
		t.Fatal("Settle failed")
	}
	st.Done(1)
	st.Done(1)
	for name, c := range map[string]*counting{"before": &before, "a": &a, "b": &b} {
		c.check(t, name, 1, 1)
	}
}

// TestReceiptSettledMeanwhile: a message settled by another goroutine
// during its receipt tells its staged holders at EndReceipt (Settled,
// then Done), once, and the holders attached before hear it from the
// settle; under -race, with the settle racing the staging.
func TestReceiptSettledMeanwhile(t *testing.T) {
	for range 200 {
		var st State
		var before counting
		staged := make([]counting, 3)
		nodes := make([]HoldNode, 4)
		st.Hold(1, &nodes[3], &before)
		st.BeginReceipt()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.Settle(1, Nack, 0)
			st.Done(1)
		}()
		for i := range staged {
			st.Hold(1, &nodes[i], &staged[i])
		}
		wg.Wait()
		st.EndReceipt(1)
		st.Done(1)
		before.check(t, "before", 1, 1)
		for i := range staged {
			staged[i].check(t, "staged", 1, 1)
		}
		if t.Failed() {
			return
		}
	}
}

// TestEndReceiptWithout: a receipt that staged nothing, or a State that
// never began one, ends cleanly; Hold after it attaches as usual.
func TestEndReceiptWithout(t *testing.T) {
	var st State
	st.EndReceipt(1)
	st.BeginReceipt()
	st.EndReceipt(1)
	var c counting
	var n HoldNode
	if !st.Hold(1, &n, &c) {
		t.Fatal("Hold failed")
	}
	st.Settle(1, Ack, 0)
	st.Done(1)
	c.check(t, "after", 1, 1)
}
