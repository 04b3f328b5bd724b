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

func (r *traceRec) StartRPC(op string, seconds int32, ackIDs []string, _ []Tag) func(Attempt) {
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
		// The first request carrying t fails it transiently, every one
		// carrying p fails it for good; the others are confirmed.
		var mu sync.Mutex
		tFailed := false
		c := &stubClient{reply: func(_ context.Context, c call) error {
			mu.Lock()
			defer mu.Unlock()
			reasons := map[string]string{}
			for _, id := range c.ids {
				switch {
				case id == "t" && !tFailed:
					tFailed = true
					reasons[id] = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
				case id == "p":
					reasons[id] = ReasonInvalidAckID
				}
			}
			if len(reasons) > 0 {
				return ackIDFailure(reasons)
			}
			return nil
		}}
		rec := &traceRec{}
		a := newAck(t, c, Config{Tracer: rec})
		for _, id := range []string{"ok1", "t", "p", "ok2"} {
			a.AckWithResult(id)
		}
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		a.NackWithResult("n", 0)
		a.NackWithResult("d", 3*time.Second)
		a.Modacks([]string{"m"}, 30)
		if err := a.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		closeAck(t, a)

		// Per ack id, the attempts that carried it and what became of it
		// (how ids are cut into requests is the acknowledger's business).
		type fate struct {
			op               string
			seconds          int32
			tries            int
			failed, retried  int
			confirmed, ended bool
		}
		fates := map[string]*fate{}
		for _, at := range rec.snapshot() {
			if !at.ended {
				t.Errorf("attempt %+v never ended", at)
			}
			state := make([]string, len(at.ids))
			for _, i := range at.at.Failed {
				state[i] = "failed"
			}
			for _, i := range at.at.Retry {
				state[i] = "retry"
			}
			for i, id := range at.ids {
				f := fates[id]
				if f == nil {
					f = &fate{op: at.op, seconds: at.seconds}
					fates[id] = f
				}
				f.tries++
				switch state[i] {
				case "failed":
					f.failed++
				case "retry":
					f.retried++
				default:
					f.confirmed = true
				}
			}
		}
		want := map[string]fate{
			"ok1": {op: "ack", tries: 1, confirmed: true},
			"ok2": {op: "ack", tries: 1, confirmed: true},
			"t":   {op: "ack", tries: 2, retried: 1, confirmed: true},
			"p":   {op: "ack", tries: 1, failed: 1},
			"n":   {op: "nack", tries: 1, confirmed: true},
			"d":   {op: "nack", seconds: 3, tries: 1, confirmed: true},
			"m":   {op: "modack", seconds: 30, tries: 1, confirmed: true},
		}
		for id, w := range want {
			got := fates[id]
			if got == nil {
				t.Errorf("%s: never traced", id)
				continue
			}
			got.ended = false
			if *got != w {
				t.Errorf("%s: traced %+v, want %+v", id, *got, w)
			}
		}
	})
}
