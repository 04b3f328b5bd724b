package flow

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

func tenantMsg(tenant string, i int) *source.Message {
	return &source.Message{ID: fmt.Sprintf("%s-%d", tenant, i), Attributes: map[string]string{"tenant": tenant}}
}

// TestKeyedGateSharesTheBudget: a flood of 300 messages of one tenant is
// queued before 30 of each of two others, under a budget of 6 and a
// consumer that settles one message every 10 ms (virtual time). After
// every settle it counts what each tenant holds (admitted, unsettled):
// the budget is always spent whole; a tenant at or over its share (6 / 3
// while all three wait) is given nothing while another waits under its
// share; the flood, which came first and alone, comes down to its share
// and the three then hold 2 each until a and b are through; after that
// the flood takes the whole budget again.
func TestKeyedGateSharesTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(6, Unlimited)
		gate := KeyedFlowGate(fc, ByAttribute("tenant"))
		in := make(chan *source.Message, 400)
		all := map[string][]*source.Message{}
		queue := func(tenant string, i int) {
			m := tenantMsg(tenant, i)
			all[tenant] = append(all[tenant], m)
			in <- m
		}
		for i := range 300 {
			queue("flood", i)
		}
		for i := range 30 {
			queue("a", i)
			queue("b", i)
		}
		close(in)
		tenants := []string{"flood", "a", "b"}
		// held counts each tenant's messages that hold a permit of the
		// gate; waiting, those it has not admitted yet (neither held nor
		// settled: only the consumer settles).
		count := func() (held, waiting map[string]int) {
			held, waiting = map[string]int{}, map[string]int{}
			for tenant, ms := range all {
				for _, m := range ms {
					permitted := false
					message.Of(m).Holders(func(h message.Holder) bool {
						_, permitted = h.(*keyedPermit)
						return !permitted
					})
					switch {
					case permitted:
						held[tenant]++
					case m.Outcome() == source.Pending:
						waiting[tenant]++
					}
				}
			}
			return held, waiting
		}
		g := stage.NewGroup(context.Background())
		out := gate.Run(g, in)
		synctest.Wait() // the gate takes in what its bound allows and admits what the budget allows

		handed := map[string]int{}
		prev, _ := count()
		if prev["flood"] != 6 {
			t.Fatalf("first admitted %v, want the flood's 6 (it came first and alone)", prev)
		}
		shared := false // the three have held 2 each
		for m := range out {
			handed[m.Attributes["tenant"]]++
			time.Sleep(10 * time.Millisecond)
			m.Ack()
			synctest.Wait() // the gate admits the next message

			held, waiting := count()
			total, active := 0, 0
			for _, tenant := range tenants {
				total += held[tenant]
				if held[tenant] > 0 || waiting[tenant] > 0 {
					active++
				}
			}
			anyWaiting := waiting["flood"]+waiting["a"]+waiting["b"] > 0
			if anyWaiting && total != 6 || total > 6 {
				t.Fatalf("tenants hold %v (%d permits) with %v waiting, want the budget of 6 spent whole", held, total, waiting)
			}
			share := 6 / max(active, 1)
			for _, tenant := range tenants {
				if held[tenant] <= prev[tenant] || prev[tenant] < share {
					continue
				}
				for _, other := range tenants {
					if other != tenant && waiting[other] > 0 && held[other] < share {
						t.Fatalf("tenant %s given a permit at %d of its share %d while %s waited at %d (held %v, waiting %v)",
							tenant, prev[tenant], share, other, held[other], held, waiting)
					}
				}
			}
			if held["flood"] == 2 && held["a"] == 2 && held["b"] == 2 {
				shared = true
			}
			if shared && waiting["a"]+waiting["b"] > 0 && (held["flood"] != 2 || held["a"] != 2 || held["b"] != 2) {
				t.Fatalf("tenants hold %v while a and b still wait (%v), want 2 each", held, waiting)
			}
			if held["a"]+held["b"] == 0 && waiting["a"]+waiting["b"] == 0 {
				if want := min(6, held["flood"]+waiting["flood"]); held["flood"] != want {
					t.Fatalf("a and b are through but the flood holds %d, want %d (the whole budget)", held["flood"], want)
				}
			}
			prev = held
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if !shared {
			t.Fatal("the three tenants never held 2 each")
		}
		if handed["flood"] != 300 || handed["a"] != 30 || handed["b"] != 30 {
			t.Fatalf("handed on %v, want every message once", handed)
		}
		if fc.Outstanding() != 0 {
			t.Fatalf("%d permits held after every message settled", fc.Outstanding())
		}
	})
}

// TestKeyedGateLendsUnusedShare: a key alone takes the whole budget.
func TestKeyedGateLendsUnusedShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(6, Unlimited)
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
		fc := NewFlowControl(4, Unlimited)
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

// keyedPass runs n messages, keyed over keys tenants in turn, through a
// standalone KeyedGate with a budget of 100 to a consumer that acks each
// at once, and returns how long it took (the messages are built before).
func keyedPass(tb testing.TB, n, keys int) time.Duration {
	tb.Helper()
	ms := make([]*source.Message, n)
	for i := range ms {
		ms[i] = &source.Message{ID: strconv.Itoa(i), Attributes: map[string]string{"tenant": strconv.Itoa(i % keys)}}
	}
	fc := NewFlowControl(100, Unlimited)
	runtime.GC()
	start := time.Now()
	g := stage.NewGroup(context.Background())
	in := make(chan *source.Message)
	go func() {
		defer close(in)
		for _, m := range ms {
			in <- m
		}
	}()
	handed := 0
	for m := range KeyedFlowGate(fc, ByAttribute("tenant")).Run(g, in) {
		handed++
		m.Ack()
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	took := time.Since(start)
	if handed != n || fc.Outstanding() != 0 {
		tb.Fatalf("handed on %d of %d, %d permits still held", handed, n, fc.Outstanding())
	}
	return took
}

// TestKeyedGateCostDoesNotGrowWithKeys: 40,000 messages of 40,000 keys
// take at most twice as long as 40,000 of one key (each the fastest of
// three runs, interleaved, so a busy machine slows both alike). The
// gate's cost per message does not depend on the number of keys.
func TestKeyedGateCostDoesNotGrowWithKeys(t *testing.T) {
	const n = 40_000
	one, many := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range 3 {
		one = min(one, keyedPass(t, n, 1))
		many = min(many, keyedPass(t, n, n))
	}
	t.Logf("%d messages: 1 key %v, %d keys %v (%.2f×)", n, one, n, many, float64(many)/float64(one))
	if many > 2*one {
		t.Fatalf("%d keys took %v, 1 key %v: more than 2×", n, many, one)
	}
}

// BenchmarkKeyedGate: the cost per message of a standalone KeyedGate
// (budget 100, each message acked at once) with 1 key and with a new key
// for every message; the two should match.
//
//	go test ./flow/ -run '^$' -bench KeyedGate
func BenchmarkKeyedGate(b *testing.B) {
	for _, keys := range []int{1, 40_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			const n = 40_000
			var total time.Duration
			for b.Loop() {
				total += keyedPass(b, n, keys)
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}
