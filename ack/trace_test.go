package ack

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// traceRec records what a Tracer is told.
type traceRec struct {
	mu       sync.Mutex
	attempts []tracedAttempt
}

type tracedAttempt struct {
	op      string
	seconds int32
	ids     []string
	at      Attempt
	ended   bool
}

func (r *traceRec) StartRPC(op string, seconds int32, ackIDs []string) func(Attempt) {
	r.mu.Lock()
	i := len(r.attempts)
	r.attempts = append(r.attempts, tracedAttempt{op: op, seconds: seconds, ids: slices.Clone(ackIDs)})
	r.mu.Unlock()
	return func(at Attempt) {
		r.mu.Lock()
		r.attempts[i].at, r.attempts[i].ended = at, true
		r.mu.Unlock()
	}
}

func (r *traceRec) snapshot() []tracedAttempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.attempts)
}

// TestTracerSeesEachAttempt: the Tracer is told of every attempt with its
// RPC's name and, once it is over, which ack ids failed for good and which
// will be retried (the rest were confirmed).
func TestTracerSeesEachAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		attempt := 0
		c := &stubClient{reply: func(_ context.Context, c call) error {
			mu.Lock()
			defer mu.Unlock()
			attempt++
			if c.method == "Acknowledge" && attempt == 1 {
				return ackIDFailure(map[string]string{"t": "TRANSIENT_FAILURE_UNORDERED_ACK_ID", "p": ReasonInvalidAckID})
			}
			return nil
		}}
		rec := &traceRec{}
		a := newAck(t, c, Config{ExactlyOnce: true, Tracer: rec})
		for _, id := range []string{"ok1", "t", "p", "ok2"} {
			a.Ack(id)
		}
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		a.Nack("n", 0)
		a.Nack("d", 3*time.Second)
		a.Modacks([]string{"m"}, 30)
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		closeAck(t, a)

		got := rec.snapshot()
		if len(got) != 5 {
			t.Fatalf("%d attempts traced, want 5: %+v", len(got), got)
		}
		first, retry := got[0], got[1]
		if first.op != "ack" || !slices.Equal(first.ids, []string{"ok1", "t", "p", "ok2"}) || !first.ended ||
			first.at.Err == nil || !slices.Equal(first.at.Failed, []int{2}) || !slices.Equal(first.at.Retry, []int{1}) {
			t.Errorf("first attempt %+v, want ack of 4 with p failed and t retried", first)
		}
		if retry.op != "ack" || !slices.Equal(retry.ids, []string{"t"}) || retry.at.Err != nil || !retry.ended {
			t.Errorf("retry %+v, want t confirmed", retry)
		}
		ops := map[string]int32{}
		for _, at := range got[2:] {
			if !at.ended || at.at.Err != nil {
				t.Errorf("%+v: not ended, or failed", at)
			}
			ops[at.op+":"+at.ids[0]] = at.seconds
		}
		if s, ok := ops["nack:n"]; !ok || s != 0 {
			t.Errorf("nack of n: %v", ops)
		}
		if s, ok := ops["nack:d"]; !ok || s != 3 {
			t.Errorf("delayed nack of d: %v", ops)
		}
		if s, ok := ops["modack:m"]; !ok || s != 30 {
			t.Errorf("modack of m: %v", ops)
		}
	})
}
