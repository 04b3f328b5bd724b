package flow

import (
	"log/slog"
	"slices"
	"strings"
	"sync"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"context"
	"fmt"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
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
						p, ok := h.(*permit)
						permitted = ok && p.key != nil
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
// five runs, interleaved, so a busy machine slows both alike). The
// gate's cost per message does not depend on the number of keys.
func TestKeyedGateCostDoesNotGrowWithKeys(t *testing.T) {
	const n = 40_000
	one, many := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range 5 {
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

// warnings is a slog handler that keeps every record at Warn or above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// handed is one message as the consumer got it.
type handed struct {
	tenant        string
	received, got time.Time
}

// TestKeyedGateFusedAfterSource: pipeline.From(src).Via(EagerTrack,
// KeyedFlowGate) against pubsubtest over gRPC, a budget of 100 (the gate
// holding up to 200), the source's server-side default of 1,000, and a
// consumer that takes 2 ms a message. Tenant "big" publishes 1,200 messages, then "small" 10, then
// "big" 300 more, so big has a backlog in the client whenever small's
// messages are there.
func TestKeyedGateFusedAfterSource(t *testing.T) {
	const budget, share = 100, 50 // share: the budget between two tenants
	f := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: time.Minute})
	tenant := func(name string) func(int, *pubsubpb.PubsubMessage) {
		return func(_ int, m *pubsubpb.PubsubMessage) { m.Attributes = map[string]string{"tenant": name} }
	}
	f.Publish(t, pubsubtest.Messages(1200, tenant("big"))...)
	f.Publish(t, pubsubtest.Messages(10, tenant("small"))...)
	f.Publish(t, pubsubtest.Messages(300, tenant("big"))...)
	const total = 1510

	ext, err := NewExtender(f.Subscriber, ExtenderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	src, err := source.Subscribe(f.Subscriber, source.Config{Subscription: f.Sub})
	if err != nil {
		t.Fatal(err)
	}
	fc := NewFlowControl(budget, Unlimited)
	kg := KeyedFlowGate(fc, ByAttribute("tenant"))
	kg.MaxWaiting = 2 * budget
	var warned warnings
	kg.Logger = slog.New(&warned)

	var got []handed
	var mostHeld int64
	ctx, cancel := context.WithCancel(context.Background())
	consume := pipeline.ForEach(func(_ context.Context, m *source.Message) error {
		mostHeld = max(mostHeld, fc.Outstanding())
		got = append(got, handed{m.Attributes["tenant"], m.ReceiveTime, time.Now()})
		time.Sleep(2 * time.Millisecond) // the work
		m.Ack()
		if len(got) == total {
			cancel()
		}
		return nil
	})
	_ = pipeline.FromContext(ctx, src).Via(EagerTrack(ext, 0), kg).To(consume)
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != total {
		t.Fatalf("consumed %d of %d", len(got), total)
	}

	t.Logf("server max outstanding %d, FlowControl max %d, most of big's handed on while a small one waited %d, warnings %q",
		f.Server.SubscriptionStats(f.Sub).MaxOutstanding, mostHeld, mostAhead(got), warned.all())
	t.Run("held within the budget", func(t *testing.T) {
		if st := f.Server.SubscriptionStats(f.Sub); st.MaxOutstanding > budget || mostHeld > budget {
			t.Fatalf("the server had up to %d outstanding, the FlowControl %d; want at most the budget of %d", st.MaxOutstanding, mostHeld, budget)
		}
	})
	t.Run("small tenant served within a round", func(t *testing.T) {
		if ahead := mostAhead(got); ahead > share {
			t.Fatalf("a small message waited in the client while %d of big's were handed on; want at most its share of %d", ahead, share)
		}
	})
	t.Run("no late warning", func(t *testing.T) {
		for _, w := range warned.all() {
			if strings.Contains(w, "sits behind a buffer") {
				t.Fatalf("the fused gate warned: %q", w)
			}
		}
	})
}

// mostAhead is the most messages of big handed on while a message of
// small waited in the client (from its receipt to its hand-off).
func mostAhead(got []handed) int {
	most := 0
	for i, h := range got {
		if h.tenant != "small" {
			continue
		}
		ahead := 0
		for _, b := range got[:i] {
			if b.tenant == "big" && b.got.After(h.received) {
				ahead++
			}
		}
		most = max(most, ahead)
	}
	return most
}

// TestKeyedGateExpiresWhatLapsesWhileOffered: a message offered
// downstream that nobody takes is expired when it is about to lapse,
// not handed on later as a copy the server may have given out again.
func TestKeyedGateExpiresWhatLapsesWhileOffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(6, Unlimited)
		m := tenantMsg("a", 0)
		message.Of(m).SetDeadline(time.Now().Add(10*time.Second), 10*time.Second)
		in := make(chan *source.Message, 1)
		in <- m
		close(in)
		g := stage.NewGroup(context.Background())
		out := KeyedFlowGate(fc, ByAttribute("tenant")).Run(g, in)
		time.Sleep(10 * time.Second) // downstream takes nothing until the deadline
		synctest.Wait()
		if got, ok := <-out; ok {
			t.Fatalf("handed on %s (outcome %v) after its deadline", got.ID, got.Outcome())
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if m.Outcome() != source.Expired || fc.Outstanding() != 0 {
			t.Fatalf("outcome %v, %d permits held; want expired and none", m.Outcome(), fc.Outstanding())
		}
	})
}
