package flow

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

// TestMaxExtension: a lease held past MaxExtension is dropped, the message
// settled as Expired and reported, and the server redelivers it once the
// last deadline we asked for has passed.
func TestMaxExtension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, subCfg(10*time.Second, false))
		var ev events
		e := newExt(t, f.client, ExtenderConfig{StreamAckDeadline: 10 * time.Second, MaxExtension: 45 * time.Second, events: ev.fn()})
		a := newAcker(f.client)
		f.publish(t, 3)
		msgs := f.pull(t, 3, a)
		e.track(msgs)
		time.Sleep(40 * time.Second)
		if st := f.srv.SubscriptionStats(f.sub); st.Expired != 0 || st.ModAcks < 3*4 {
			t.Fatalf("before max extension: expired %d, modacks %d", st.Expired, st.ModAcks)
		}
		time.Sleep(10 * time.Second) // 50 s: past 45 s, at most one tick later
		synctest.Wait()
		for _, m := range msgs {
			if o := a.outcome(m); o != message.Expired || m.Outcome() != source.Expired {
				t.Fatalf("message %s outcome %v, want expired", m.ID, o)
			}
		}
		if e.leaseCount() != 0 || ev.count(event.Expired) != 3 {
			t.Fatalf("Len %d, expired events %d", e.leaseCount(), ev.count(event.Expired))
		}
		time.Sleep(15 * time.Second) // the last deadline granted runs out
		again := f.pull(t, 3, nil)
		if len(again) != 3 || again[0].DeliveryAttempt != 2 {
			t.Fatalf("redelivered %d messages (attempt %d), want 3 (attempt 2)", len(again), again[0].DeliveryAttempt)
		}
		if st := f.srv.SubscriptionStats(f.sub); st.Expired != 3 || st.Redelivered != 3 {
			t.Fatalf("server expired %d redelivered %d, want 3 and 3", st.Expired, st.Redelivered)
		}
	})
}

// TestLongAckIDsStayWithinRequestLimits tracks 5,000 leases with long ack
// ids against pubsubtest, which refuses Acknowledge / ModifyAckDeadline
// requests over 512 KiB: every receipt modack and every extension stays
// within 1000 ids and 512 KiB. With 300-character ids the id limit binds;
// with 1000-character ids the byte limit does.
func TestLongAckIDsStayWithinRequestLimits(t *testing.T) {
	for _, idLen := range []int{300, 1000} {
		t.Run(fmt.Sprintf("%d chars", idLen), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, subCfg(10*time.Second, false))
				c := &capture{SubscriberClient: f.client}
				var ev events
				e := newExt(t, c, ExtenderConfig{StreamAckDeadline: 10 * time.Second, events: ev.fn()})
				e.track(handMade(f.sub, 5000, idLen, false))
				time.Sleep(30 * time.Second)
				synctest.Wait()
				rounds := map[string]int{}
				for _, r := range c.requests() {
					if len(r.ids) > ackids.MaxIDs || r.bytes > limits.MaxAckRequestBytes {
						t.Errorf("request of %d ids, %d bytes", len(r.ids), r.bytes)
					}
					for _, id := range r.ids {
						rounds[id]++
					}
				}
				for id, n := range rounds {
					if n < 3 { // receipt + at least two extensions in 30 s at 10 s deadlines
						t.Fatalf("ack id %.10s… modacked %d times", id, n)
					}
				}
				ms := f.srv.MethodStats("ModifyAckDeadline")
				st := f.srv.SubscriptionStats(f.sub)
				if len(rounds) != 5000 || ms.Errors != 0 || st.RejectedRequests != 0 || ms.MaxRequestBytes > limits.MaxAckRequestBytes {
					t.Fatalf("%d ids modacked; server errors %d, rejected %d, largest %d bytes", len(rounds), ms.Errors, st.RejectedRequests, ms.MaxRequestBytes)
				}
				t.Logf("%d requests, largest %d bytes; %d extended", ms.Calls, ms.MaxRequestBytes, ev.count(event.Extend))
			})
		})
	}
}

// TestSlowAcknowledgeDoesNotDelayExtension: every Acknowledge takes 5 s
// (fault injection) and the settle path acks one message at a time, so the
// last ack lands after 100 s; an acked message keeps its lease until its
// ack is final, and extension keeps every lease alive meanwhile, on its
// own RPCs: no expiry, no redelivery.
func TestSlowAcknowledgeDoesNotDelayExtension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, subCfg(10*time.Second, false))
		var ev events
		e := newExt(t, f.client, ExtenderConfig{StreamAckDeadline: 10 * time.Second, events: ev.fn()})
		a := newAcker(f.client)
		f.publish(t, 20)
		msgs := f.pull(t, 20, a)
		e.track(msgs)
		f.srv.SetLatency("Acknowledge", 5*time.Second)
		start := time.Now()
		done := make(chan struct{})
		go func() { // the acknowledger: one ack RPC at a time
			defer close(done)
			for _, m := range msgs {
				m.Ack()
			}
		}()
		<-done
		took := time.Since(start)
		if took < 100*time.Second {
			t.Fatalf("acks took %v, want ≥ 100 s (5 s each)", took)
		}
		st := f.srv.SubscriptionStats(f.sub)
		if st.Acked != 20 || st.Expired != 0 || st.Redelivered != 0 {
			t.Fatalf("acked %d expired %d redelivered %d, want 20, 0, 0", st.Acked, st.Expired, st.Redelivered)
		}
		// Extensions kept their cadence while acks crawled: the next one
		// always came before the deadline granted by the previous one ran
		// into the margin (the deadline grows as slow acks teach Adaptive).
		prev, granted := start, 10*time.Second
		exts := ev.of(event.Extend)
		for _, x := range exts {
			if gap := x.at.Sub(prev); gap > granted-defaultMargin+granted/40+time.Millisecond {
				t.Fatalf("no extension for %v after one granting %v (at %v)", gap, granted, prev.Sub(start))
			}
			prev, granted = x.at, x.Deadline
		}
		if end := start.Add(took); len(exts) < 5 || !prev.Add(granted).After(end) {
			t.Fatalf("%d extensions, the last at %v granting %v; acks ended at %v", len(exts), prev.Sub(start), granted, took)
		}
		if e.leaseCount() != 0 {
			t.Fatalf("Len %d after all acks", e.leaseCount())
		}
	})
}

// TestExactlyOnceReceipt: receipt modacks ask ≥ 60 s; Confirmed gives a
// channel until the server confirmed, then nil; a permanent per-ack-id
// failure drops and settles that message (Expired) with a
// ReceiptModackFail event; a transient one is retried.
func TestExactlyOnceReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, subCfg(10*time.Second, true))
		c := &capture{SubscriberClient: f.client}
		var ev events
		e := newExt(t, c, ExtenderConfig{StreamAckDeadline: 10 * time.Second, events: ev.fn()})
		a := newAcker(f.client)
		f.publish(t, 4)
		msgs := f.pull(t, 4, a)
		if !msgs[0].ExactlyOnce {
			t.Fatal("fixture: message not exactly-once")
		}
		f.srv.FailNextAckIDs(1, "PERMANENT_FAILURE_INVALID_ACK_ID")
		var waits []<-chan struct{}
		for _, m := range msgs[:2] {
			e.track(one(m))
			w := e.confirmed(m)
			if w == nil {
				t.Fatal("Confirmed = nil before the receipt modack")
			}
			waits = append(waits, w)
		}
		for _, w := range waits {
			<-w
		}
		// The outcome is set before the waiter is let go; the holders
		// hear of it, and the event is emitted, just after.
		if o := msgs[0].Outcome(); o != source.Expired || e.confirmed(msgs[0]) != nil {
			t.Fatalf("failed receipt: outcome %v", o)
		}
		synctest.Wait()
		if o := a.outcome(msgs[0]); o != message.Expired {
			t.Fatalf("failed receipt: the settle path heard %v", o)
		}
		if fe := ev.of(event.ReceiptModackFail); len(fe) != 1 || fe[0].Count != 1 || fe[0].Err == nil {
			t.Fatalf("receipt failure events %+v", fe)
		}
		if e.confirmed(msgs[1]) != nil || msgs[1].Settled() || e.leaseCount() != 1 {
			t.Fatalf("confirmed message: settled %v, Len %d", msgs[1].Settled(), e.leaseCount())
		}

		f.srv.FailNextAckIDs(1, "TRANSIENT_FAILURE_UNORDERED_ACK_ID")
		e.track(one(msgs[2]))
		<-e.confirmed(msgs[2])
		if msgs[2].Settled() || len(ev.of(event.Retry)) != 1 {
			t.Fatalf("transient failure: settled %v, retries %d", msgs[2].Settled(), len(ev.of(event.Retry)))
		}
		for _, r := range c.requests() {
			if r.secs < 60 {
				t.Fatalf("exactly-once modack asked %ds, want ≥ 60s", r.secs)
			}
		}
		// Released before confirmation: the waiter is let go, and the
		// message (settled) is skipped by the stage that waits.
		c.setHook(func(ctx context.Context, _ *pubsubpb.ModifyAckDeadlineRequest) error { <-ctx.Done(); return ctx.Err() })
		e.track(one(msgs[3]))
		w := e.confirmed(msgs[3])
		msgs[3].Nack()
		<-w
		c.setHook(nil)
	})
}

// TestExactlyOncePermanentExtensionFailure: an ack id the server reports
// as permanently failed on extension is dropped with an Expired event.
func TestExactlyOncePermanentExtensionFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, subCfg(10*time.Second, true))
		var ev events
		e := newExt(t, f.client, ExtenderConfig{StreamAckDeadline: 10 * time.Second, events: ev.fn()})
		a := newAcker(f.client)
		f.publish(t, 2)
		msgs := f.pull(t, 2, a)
		e.track(msgs)
		for _, m := range msgs {
			if w := e.confirmed(m); w != nil {
				<-w
			}
		}
		f.srv.FailNextAckIDs(1, "PERMANENT_FAILURE_INVALID_ACK_ID")
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		ex := ev.of(event.Expired)
		if len(ex) != 1 || ex[0].Count != 1 || ex[0].Err == nil || e.leaseCount() != 1 {
			t.Fatalf("expired events %+v, Len %d", ex, e.leaseCount())
		}
		dropped := 0
		for _, m := range msgs {
			if a.outcome(m) == message.Expired {
				dropped++
			}
		}
		if dropped != 1 || ev.count(event.Extend) == 0 {
			t.Fatalf("dropped %d, extended %d", dropped, ev.count(event.Extend))
		}
	})
}
