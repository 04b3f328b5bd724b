package flow

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

func tenantMsg(tenant string, i int) *source.Message {
	return &source.Message{ID: fmt.Sprintf("%s-%d", tenant, i), Attributes: map[string]string{"tenant": tenant}}
}

// TestKeyedGateSharesTheBudget: a flood of 300 messages of one tenant is
// queued before 30 of each of two others, under a budget of 6 and a
// consumer that settles one message every 10 ms. While all three wait,
// no tenant holds more than its share (6 / 3) at any moment, and each
// gets a third of what is handed on, in turn; the flood does not starve
// the others. Once they are served, the flood takes the whole budget.
func TestKeyedGateSharesTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(6, 0)
		gate := KeyedFlowGate(fc, ByAttribute("tenant"))
		in := make(chan *source.Message, 400)
		for i := range 300 {
			in <- tenantMsg("flood", i)
		}
		for i := range 30 {
			in <- tenantMsg("a", i)
			in <- tenantMsg("b", i)
		}
		close(in)
		g := stage.NewGroup(context.Background())
		out := gate.Run(g, in)
		time.Sleep(time.Millisecond) // the gate takes in what its bound allows
		synctest.Wait()

		handed := map[string]int{}
		var order []string
		for m := range out {
			tenant := m.Attributes["tenant"]
			handed[tenant]++
			order = append(order, tenant)
			time.Sleep(10 * time.Millisecond)
			m.Ack()
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if handed["flood"] != 300 || handed["a"] != 30 || handed["b"] != 30 {
			t.Fatalf("handed on %v, want every message once", handed)
		}
		// The first 6 admitted are the flood's (it came first and was
		// alone); from then on a and b wait too, and the three share:
		// count each one's part up to the last message of a or b.
		window := map[string]int{}
		last := 0
		for i, tenant := range order {
			if tenant == "a" || tenant == "b" {
				last = i
			}
		}
		for _, tenant := range order[6 : last+1] {
			window[tenant]++
		}
		total := window["flood"] + window["a"] + window["b"]
		t.Logf("shares while all three waited: %v of %d", window, total)
		for _, tenant := range []string{"flood", "a", "b"} {
			if d := window[tenant]*3 - total; d < -6 || d > 6 {
				t.Fatalf("tenant %s got %d of %d while all three waited, want a third (±2)", tenant, window[tenant], total)
			}
		}
		if fc.Outstanding() != 0 {
			t.Fatalf("%d permits held after every message settled", fc.Outstanding())
		}
	})
}

// TestKeyedGateLendsUnusedShare: a key alone takes the whole budget.
func TestKeyedGateLendsUnusedShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(6, 0)
		in := make(chan *source.Message, 20)
		for i := range 20 {
			in <- tenantMsg("only", i)
		}
		close(in)
		g := stage.NewGroup(context.Background())
		out := KeyedFlowGate(fc, ByAttribute("tenant")).Run(g, in)
		synctest.Wait()
		if n := fc.Outstanding(); n != 6 {
			t.Fatalf("a key alone holds %d of a budget of 6, want all of it", n)
		}
		for m := range out {
			m.Ack()
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestKeyedGateNacksWhatItHoldsOnCancel: cancelled, the gate nacks what
// it admitted and what waited, and its permits come back.
func TestKeyedGateNacksWhatItHoldsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(4, 0)
		in := make(chan *source.Message, 10)
		var ms []*source.Message
		for i := range 10 {
			m := tenantMsg(fmt.Sprint(i%2), i)
			ms = append(ms, m)
			in <- m
		}
		g := stage.NewGroup(context.Background())
		_ = KeyedFlowGate(fc, ByAttribute("tenant")).Run(g, in)
		synctest.Wait()
		g.Cancel()
		_ = g.Wait()
		for _, m := range ms {
			if m.Outcome() != source.Nack {
				t.Fatalf("message %s is %v after the gate stopped, want nack", m.ID, m.Outcome())
			}
		}
		if fc.Outstanding() != 0 {
			t.Fatalf("%d permits held after the gate stopped", fc.Outstanding())
		}
	})
}
