package ack

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestExactlyOnceSendsAtOnceThenCoalesces: an ack someone waits on goes out
// at once when no such request is in flight — without the flush interval
// passing — and what arrives while it is in flight goes together the moment
// it completes, still cut at 1,000 ids a request.
func TestExactlyOnceSendsAtOnceThenCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		c := &stubClient{reply: func(ctx context.Context, _ call) error {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil
		}}
		a := newAck(t, c, Config{ExactlyOnce: true, FlushInterval: time.Minute})
		start := time.Now()
		first := a.Ack("first")
		synctest.Wait()
		calls := c.snapshot()
		if len(calls) != 1 || len(calls[0].ids) != 1 || time.Since(start) != 0 {
			t.Fatalf("after one exactly-once ack: %d calls at +%v, want one at once", len(calls), time.Since(start))
		}
		more := ids("more", 2500)
		for _, id := range more {
			a.Ack(id)
		}
		synctest.Wait()
		if n := len(c.snapshot()); n != 3 {
			// Full requests never wait: two of 1,000 go, the 500 wait.
			t.Fatalf("%d calls while the first is in flight, want 3 (two full ones)", n)
		}
		gate <- struct{}{}
		gate <- struct{}{}
		gate <- struct{}{}
		if err := first.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		calls = c.snapshot()
		if len(calls) != 4 || len(calls[3].ids) != 500 || time.Since(start) != 0 {
			t.Fatalf("after the first completed: %d calls at +%v, want the 500 waiting ones in one, at once", len(calls), time.Since(start))
		}
		sent := 0
		for _, c := range calls {
			if len(c.ids) > 1000 || c.size > 512<<10 {
				t.Fatalf("a request of %d ids, %d bytes", len(c.ids), c.size)
			}
			sent += len(c.ids)
		}
		if sent != 2501 {
			t.Fatalf("%d ids sent, want 2501", sent)
		}
		close(gate)
		closeAck(t, a)
	})
}

// TestWaitedModackGoesAtOnce: a receipt modack whose confirmation a caller
// waits for goes at once, even while lease extensions (nobody waits on them)
// are queued or in flight, which keep waiting for the tick.
func TestWaitedModackGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{}
		a := newAck(t, c, Config{FlushInterval: time.Minute})
		a.Modacks(ids("lease", 10), 60)
		r := a.ModackWithResult("receipt", 60)
		if err := r.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		calls := c.snapshot()
		if len(calls) != 1 || len(calls[0].ids) != 1 || calls[0].ids[0] != "receipt" {
			t.Fatalf("calls %+v, want only the receipt modack", calls)
		}
		closeAck(t, a)
	})
}

// TestPlainAcksStillBatch: without exactly-once an ack waits for the flush
// interval, so acks under load share requests.
func TestPlainAcksStillBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &stubClient{}
		a := newAck(t, c, Config{})
		for _, id := range ids("a", 10) {
			a.Ack(id)
		}
		synctest.Wait()
		if n := len(c.snapshot()); n != 0 {
			t.Fatalf("%d calls before the flush interval, want 0", n)
		}
		time.Sleep(DefaultFlushInterval)
		synctest.Wait()
		if calls := c.snapshot(); len(calls) != 1 || len(calls[0].ids) != 10 {
			t.Fatalf("calls %+v after the interval, want one with all 10", calls)
		}
		closeAck(t, a)
	})
}
