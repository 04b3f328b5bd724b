package flow

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

func TestConfigValidate(t *testing.T) {
	bad := map[string]ExtenderConfig{
		"stream deadline too short": {StreamAckDeadline: time.Millisecond},
		"stream deadline too long":  {StreamAckDeadline: 601 * time.Second},
		"negative margin":           {Margin: -1},
		"negative max extension":    {MaxExtension: -time.Minute},
		"negative close timeout":    {CloseTimeout: -1},
		"fixed interval zero":       {Strategy: Fixed(0, 10*time.Second)},
		"fixed interval ≥ deadline": {Strategy: Fixed(10*time.Second, 10*time.Second)},
		"fixed deadline 0":          {Strategy: Fixed(time.Millisecond, 0)},
		"fixed deadline 601s":       {Strategy: Fixed(time.Second, 601*time.Second)},
		"adaptive min < 1s":         {Strategy: Adaptive(AdaptiveConfig{Min: time.Millisecond})},
		"adaptive max > 600s":       {Strategy: Adaptive(AdaptiveConfig{Max: 700 * time.Second})},
		"adaptive min > max":        {Strategy: Adaptive(AdaptiveConfig{Min: 30 * time.Second, Max: 20 * time.Second})},
	}
	for name, cfg := range bad {
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "flow: ") {
			t.Errorf("%s: Validate() = %v, want a flow: error", name, err)
		}
		if _, err := NewExtender(&capture{}, cfg); err == nil {
			t.Errorf("%s: NewExtender accepted it", name)
		}
	}
	if err := (ExtenderConfig{}).Validate(); err != nil {
		t.Errorf("zero ExtenderConfig: %v", err)
	}
	if _, err := NewExtender(nil, ExtenderConfig{}); err == nil {
		t.Error("NewExtender(nil client) succeeded")
	}
}

// TestReceiptModackBatchedAndSplit: track queues receipt modacks that go out
// within a few milliseconds, batched, split at 1000 ack ids, with the
// strategy's starting deadline (the stream ack deadline).
func TestReceiptModackBatchedAndSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &capture{}
		e := newExt(t, c, ExtenderConfig{StreamAckDeadline: 30 * time.Second})
		start := time.Now()
		msgs := handMade(testSub, 2500, 8, false)
		for _, m := range msgs {
			e.track(one(m))
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		reqs := c.requests()
		seen := map[string]int{}
		for _, r := range reqs {
			if len(r.ids) > 1000 {
				t.Errorf("request with %d ack ids", len(r.ids))
			}
			if r.secs != 30 {
				t.Errorf("receipt modack deadline %ds, want 30s", r.secs)
			}
			if d := r.at.Sub(start); d > 2*receiptFlushDelay {
				t.Errorf("receipt modack sent after %v", d)
			}
			for _, id := range r.ids {
				seen[id]++
			}
		}
		if len(reqs) > 10 || len(seen) != 2500 {
			t.Fatalf("%d requests naming %d distinct ids, want ≤ 10 naming 2500", len(reqs), len(seen))
		}
		if e.leaseCount() != 2500 || e.currentDeadline() != 30*time.Second {
			t.Fatalf("Len %d Deadline %v", e.leaseCount(), e.currentDeadline())
		}
	})
}

// TestNoLeaseLapses tracks messages at staggered times for five virtual
// minutes and checks, per ack id, that every modack came before the lease
// the previous one granted ran out (with at least half the margin to
// spare), and not much earlier than needed.
func TestNoLeaseLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &capture{}
		const stream = 10 * time.Second
		e := newExt(t, c, ExtenderConfig{StreamAckDeadline: stream})
		recv := map[string]time.Time{}
		for i, m := range handMade(testSub, 60, 4, false) {
			time.Sleep(1300 * time.Millisecond)
			m.ReceiveTime = time.Now()
			recv[m.AckID] = m.ReceiveTime
			e.track(one(m))
			if i%7 == 0 {
				defer m.Nack() // some leave before the end
			}
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		d := e.currentDeadline()
		margin := min(defaultMargin, d/2)
		last := map[string]modack{}
		for _, r := range c.requests() {
			for _, id := range r.ids {
				prev, ok := last[id]
				if !ok {
					if lag := r.at.Sub(recv[id]); lag > 2*receiptFlushDelay {
						t.Errorf("%s: receipt modack %v after receipt", id, lag)
					}
				} else {
					expiry := prev.at.Add(time.Duration(prev.secs) * time.Second)
					if left := expiry.Sub(r.at); left < margin/2 {
						t.Errorf("%s: extended with %v left, want ≥ %v", id, left, margin/2)
					}
					if gap, least := r.at.Sub(prev.at), d-margin-d/4*11/10; gap < least {
						t.Errorf("%s: extended again after %v, want ≥ %v", id, gap, least)
					}
				}
				last[id] = r
			}
		}
		if len(last) != 60 {
			t.Fatalf("%d leases modacked, want 60", len(last))
		}
	})
}

// TestFixedStrategy: Fixed(200ms, 1s) extends every lease within the first
// few ticks, to 1 s, in one request.
func TestFixedStrategy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &capture{}
		e := newExt(t, c, ExtenderConfig{Strategy: Fixed(200*time.Millisecond, time.Second)})
		start := time.Now()
		e.track(handMade(testSub, 10, 2, false))
		time.Sleep(800 * time.Millisecond)
		synctest.Wait()
		var ext []modack
		for _, r := range c.requests() {
			if r.secs != 1 {
				t.Errorf("deadline %ds, want 1s", r.secs)
			}
			if r.at.Sub(start) > 100*time.Millisecond {
				ext = append(ext, r)
			}
		}
		if len(ext) == 0 || len(ext[0].ids) != 10 {
			t.Fatalf("extension requests %v, want the first to name all 10", ext)
		}
	})
}

// TestReleaseTrackEdges: settling ends a lease once (later outcomes do
// nothing) and stops its extension; track ignores duplicates, settled
// messages, messages without an ack id or a subscription, and everything
// after Close.
func TestReleaseTrackEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &capture{}
		e, err := NewExtender(c, ExtenderConfig{Strategy: Fixed(time.Second, 2*time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		ms := handMade(testSub, 3, 1, false)
		e.track(one(ms[0]))
		e.track([]*source.Message{ms[0], ms[1]})
		ms[2].Ack() // settled before tracking
		e.track(one(ms[2]))
		e.track([]*source.Message{nil, {}, {AckID: "no-sub", ReceiveTime: time.Now()}, {Subscription: testSub}})
		if e.leaseCount() != 2 {
			t.Fatalf("Len = %d, want 2", e.leaseCount())
		}
		if !ms[0].Ack() || ms[0].Ack() || ms[0].Nack() {
			t.Fatal("the first outcome did not win alone")
		}
		if ms[2].Nack() { // settled and never tracked
			t.Fatal("a settled message took a second outcome")
		}
		if e.leaseCount() != 1 {
			t.Fatalf("Len = %d, want 1", e.leaseCount())
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for _, r := range c.requests() {
			for _, id := range r.ids {
				if id == ms[0].AckID && r.at.After(time.Now().Add(-9*time.Second)) {
					t.Errorf("released lease %s extended at %v", id, r.at)
				}
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e.track(handMade(testSub, 1, 5, false))
		if e.leaseCount() != 1 {
			t.Fatalf("Len after Close+track = %d, want 1", e.leaseCount())
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAckKeepsLeaseUntilDone: an acked message keeps its lease, and keeps
// being extended, until its settle path says the ack is final (Done);
// only then does the ack teach Adaptive its latency. Any other outcome
// ends the lease at once, before Done. Stats reports leases, extensions
// and the deadline.
func TestAckKeepsLeaseUntilDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &capture{}
		var ev events
		e := newExt(t, c, ExtenderConfig{StreamAckDeadline: 30 * time.Second, Strategy: Adaptive(AdaptiveConfig{}), events: ev.fn()})
		var p heldPath
		ms := handMade(testSub, 2, 1, false)
		for _, m := range ms {
			p.bind(m)
		}
		e.track(ms)
		time.Sleep(5 * time.Second)
		ms[0].Ack()
		ms[1].Nack()
		if e.leaseCount() != 1 {
			t.Fatalf("Len = %d after an ack and a nack before Done, want 1 (the acked one)", e.leaseCount())
		}
		acked := time.Now()
		time.Sleep(time.Minute) // the ack RPC crawls
		synctest.Wait()
		extended := false
		for _, r := range c.requests() {
			for _, id := range r.ids {
				if id == ms[1].AckID && r.at.After(acked) {
					t.Fatalf("nacked message extended at %v", r.at)
				}
				if id == ms[0].AckID && r.at.After(acked) {
					extended = true
				}
			}
		}
		if !extended || e.currentDeadline() != 30*time.Second {
			t.Fatalf("acked message extended while its ack was not final: %v; Deadline %v, want 30s (nothing learnt yet)", extended, e.currentDeadline())
		}
		message.Of(ms[1]).Done(ms[1])
		message.Of(ms[0]).Done(ms[0])
		st := e.Stats()
		if st.Leases != 0 || e.leaseCount() != 0 {
			t.Fatalf("leases after Done: %+v", st)
		}
		// The ack was final 65 s after receipt: Adaptive's p99.
		if st.Deadline != 65*time.Second || st.Extended == 0 || st.Extended != uint64(ev.count(event.Extend)) || st.Expired != 0 {
			t.Fatalf("Stats = %+v, want deadline 65s and the extensions counted", st)
		}
	})
}

// TestOneExtenderManySubscriptions: one Extender serves messages of
// several subscriptions, each leased under its own subscription (ack ids
// are unique only within one), and extended on the subscription the
// message names.
func TestOneExtenderManySubscriptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &capture{}
		e := newExt(t, c, ExtenderConfig{Strategy: Fixed(time.Second, 3*time.Second)})
		a, b := "projects/p/subscriptions/a", "projects/p/subscriptions/b"
		e.track(append(handMade(a, 3, 1, false), handMade(b, 2, 1, false)...)) // ack ids 0, 1, 2 and 0, 1
		if e.leaseCount() != 5 {
			t.Fatalf("Len = %d, want 5 (same ack ids, different subscriptions)", e.leaseCount())
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		got := map[string]map[string]int{a: {}, b: {}}
		for _, r := range c.requests() {
			if got[r.sub] == nil {
				t.Fatalf("modack on %q", r.sub)
			}
			for _, id := range r.ids {
				got[r.sub][id]++
			}
		}
		if len(got[a]) != 3 || len(got[b]) != 2 || got[a]["2"] < 2 || got[b]["1"] < 2 {
			t.Fatalf("modacks by subscription %v; want a's 3 and b's 2, each extended", got)
		}
	})
}

// TestCloseBoundsHungRPC: a ModifyAckDeadline that never returns holds
// Close for CloseTimeout, then is cancelled; no goroutine is left (goleak).
func TestCloseBoundsHungRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &capture{hook: func(ctx context.Context, _ *pubsubpb.ModifyAckDeadlineRequest) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		e, err := NewExtender(c, ExtenderConfig{CloseTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e.track(handMade(testSub, 1, 1, false))
		time.Sleep(time.Second)
		start := time.Now()
		_ = e.Close()
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("Close took %v, want the 3s CloseTimeout", d)
		}
		if e.leaseCount() != 1 {
			t.Fatalf("Close settled leases: Len = %d", e.leaseCount())
		}
	})
}

// TestTransientErrorsRetried: UNAVAILABLE twice, then success; the leases
// survive and two Retry events report the backoff.
func TestTransientErrorsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, subCfg(10*time.Second, false))
		var ev events
		e := newExt(t, f.client, ExtenderConfig{StreamAckDeadline: 10 * time.Second, events: ev.fn()})
		a := newAcker(f.client)
		f.publish(t, 5)
		msgs := f.pull(t, 5, a)
		e.track(msgs)
		time.Sleep(time.Second)
		f.srv.FailNext("ModifyAckDeadline", 2, codesUnavailable)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		st := f.srv.SubscriptionStats(f.sub)
		if st.Expired != 0 || st.Redelivered != 0 {
			t.Fatalf("expired %d redelivered %d, want 0", st.Expired, st.Redelivered)
		}
		if r := ev.of(event.Retry); len(r) != 2 || r[0].Delay <= 0 || r[0].Err == nil {
			t.Fatalf("retry events %+v, want 2 with delay and error", r)
		}
		if e.leaseCount() != 5 || ev.count(event.Extend) == 0 {
			t.Fatalf("Len %d, extended %d", e.leaseCount(), ev.count(event.Extend))
		}
		for _, m := range msgs {
			m.Ack()
		}
		if st := f.srv.SubscriptionStats(f.sub); st.Acked != 5 {
			t.Fatalf("acked %d, want 5", st.Acked)
		}
	})
}

// TestHeldMessageKeepsOnlyItself: a held message keeps its batch's lease
// slab alive, but not the other messages of its batch once they are
// settled, and nothing once it is settled too: memory stays bounded by
// what is held, however many responses it came from (issue 36).
func TestHeldMessageKeepsOnlyItself(t *testing.T) {
	e := newExt(t, &capture{}, ExtenderConfig{})
	var held []*source.Message
	var settled []weak.Pointer[source.Message]
	for range 100 {
		ms := handMade(testSub, 10, 8, false)
		e.track(ms)
		held = append(held, ms[0])
		for _, m := range ms[1:] {
			m.Data = make([]byte, 1<<10)
			m.Nack()
			settled = append(settled, weak.Make(m))
		}
	}
	if n := e.leaseCount(); n != len(held) { // leaseCount sweeps the slabs
		t.Fatalf("%d leases, want %d", n, len(held))
	}
	runtime.GC()
	for i, w := range settled {
		if w.Value() != nil {
			t.Fatalf("settled message %d is still reachable while another of its batch is held", i)
		}
	}
	settled = settled[:0]
	for _, m := range held {
		m.Nack()
		settled = append(settled, weak.Make(m))
	}
	held = nil
	if n := e.leaseCount(); n != 0 {
		t.Fatalf("%d leases after every message was settled", n)
	}
	runtime.GC()
	for i, w := range settled {
		if w.Value() != nil {
			t.Fatalf("held message %d is still reachable after it was settled", i)
		}
	}
}
