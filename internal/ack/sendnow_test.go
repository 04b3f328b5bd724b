package ack

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestSendsAtOnceThenCoalesces: an ack goes out at once when no request of
// its kind is in flight, and what arrives while it is in flight goes
// together once it completes (and Gap has passed since it started), still
// cut at 1,000 ids a request — with exactly-once and without.
func TestSendsAtOnceThenCoalesces(t *testing.T) {
	for _, eo := range []bool{true, false} {
		t.Run(map[bool]string{true: "exactly-once", false: "plain"}[eo], func(t *testing.T) { sendsAtOnceThenCoalesces(t, eo) })
	}
}

func sendsAtOnceThenCoalesces(t *testing.T, eo bool) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		c := &stubClient{reply: func(ctx context.Context, _ call) error {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil
		}}
		a := newAck(t, c, Config{})
		start := time.Now()
		first := newResult()
		a.AckTag("first", eo, first)
		synctest.Wait()
		calls := c.snapshot()
		if len(calls) != 1 || len(calls[0].ids) != 1 || time.Since(start) != 0 {
			t.Fatalf("after one exactly-once ack: %d calls at +%v, want one at once", len(calls), time.Since(start))
		}
		more := ids("more", 2500)
		for _, id := range more {
			a.AckTag(id, eo, nil)
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
		time.Sleep(DefaultGap) // requests of a kind start at least Gap apart
		synctest.Wait()
		calls = c.snapshot()
		if len(calls) != 4 || len(calls[3].ids) != 500 || time.Since(start) != DefaultGap {
			t.Fatalf("after the first completed: %d calls at +%v, want the 500 waiting ones in one, %v after the first", len(calls), time.Since(start), DefaultGap)
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
// waits for goes at once, in a request of its own, even while a lease
// extension (nobody waits on it) is in flight.
func TestWaitedModackGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		c := &stubClient{reply: func(ctx context.Context, cl call) error {
			if cl.ids[0] == "receipt" {
				return nil
			}
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil
		}}
		a := newAck(t, c, Config{})
		a.Modacks(ids("lease", 10), 60)
		synctest.Wait()
		r := a.ModackWithResult("receipt", 60)
		if err := r.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		calls := c.snapshot()
		if len(calls) != 2 || len(calls[1].ids) != 1 || calls[1].ids[0] != "receipt" {
			t.Fatalf("calls %+v, want the extension and then the receipt modack alone", calls)
		}
		close(gate)
		closeAck(t, a)
	})
}
