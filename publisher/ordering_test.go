package publisher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// Many goroutines publish on shared ordering keys at once, with slow RPCs
// so batches pile up: each key has at most one batch in flight, and the
// server assigns ids (its publish order) in each goroutine's order.
func TestOrderingPerKeyUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	e.srv.SetLatency("Publish", 2*time.Millisecond)
	rec := newRecorder(pubsubpb.NewPublisherClient(e.srv.ClientConn()))
	p := e.publisher(t, Config{EnableOrdering: true, MaxMessages: 7, Delay: time.Millisecond}, rec)

	const keys, perKey, each = 6, 4, 150
	type pub struct {
		key, g, seq int
		r           *Result
	}
	var mu sync.Mutex
	var all []pub
	var wg sync.WaitGroup
	for k := range keys {
		for g := range perKey {
			wg.Go(func() {
				for seq := range each {
					m := &Message{Data: fmt.Appendf(nil, "%d/%d/%d", k, g, seq), OrderingKey: "key-" + strconv.Itoa(k)}
					r := p.Publish(context.Background(), m)
					mu.Lock()
					all = append(all, pub{k, g, seq, r})
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	last := map[[2]int]uint64{}
	lastSeq := map[[2]int]int{}
	// all holds each goroutine's publishes in its own order.
	for _, x := range all {
		id, err := strconv.ParseUint(mustGet(t, x.r), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		g := [2]int{x.key, x.g}
		if prev, ok := last[g]; ok && (id <= prev || x.seq != lastSeq[g]+1) {
			t.Fatalf("key %d goroutine %d: seq %d got id %d after id %d", x.key, x.g, x.seq, id, prev)
		}
		last[g], lastSeq[g] = id, x.seq
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for key, n := range rec.maxPer {
		if n != 1 {
			t.Fatalf("key %q had %d batches in flight at once", key, n)
		}
	}
	if len(rec.maxPer) != keys {
		t.Fatalf("saw %d keys", len(rec.maxPer))
	}
	if len(rec.reqs) < keys*perKey*each/7 {
		t.Fatalf("only %d requests: batches were not closed on count", len(rec.reqs))
	}
}

// A failed batch pauses its key: the messages queued behind it fail with
// ErrPaused, later publishes on the key fail at once without an RPC, other
// keys are unaffected, and ResumePublish lets the key publish again.
func TestPauseAfterFailureAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.SetLatency("Publish", 10*time.Millisecond)
		e.srv.FailNext("Publish", 1, codes.PermissionDenied)
		p := e.publisher(t, Config{EnableOrdering: true, MaxMessages: 1})
		ctx := context.Background()
		a1 := p.Publish(ctx, &Message{Data: []byte("a1"), OrderingKey: "A"})
		a2 := p.Publish(ctx, &Message{Data: []byte("a2"), OrderingKey: "A"})
		a3 := p.Publish(ctx, &Message{Data: []byte("a3"), OrderingKey: "A"})
		synctest.Wait()
		if e.calls() != 1 {
			t.Fatalf("%d calls: a key must have one batch in flight", e.calls())
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if _, err := a1.Get(ctx); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a1: %v, want PermissionDenied", err)
		}
		for _, r := range []*Result{a2, a3} {
			_, err := r.Get(ctx)
			var pe *Error
			if !errors.Is(err, ErrPaused) || !errors.As(err, &pe) || pe.OrderingKey != "A" || status.Code(pe.Err) != codes.PermissionDenied {
				t.Fatalf("queued message: %v, want a paused Error caused by PermissionDenied", err)
			}
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("paused error code %v", status.Code(err))
			}
		}
		a4 := p.Publish(ctx, &Message{Data: []byte("a4"), OrderingKey: "A"})
		if !settled(a4) {
			t.Fatal("a publish on a paused key did not fail at once")
		}
		if _, err := a4.Get(ctx); !errors.Is(err, ErrPaused) {
			t.Fatalf("a4: %v", err)
		}
		b1 := p.Publish(ctx, &Message{Data: []byte("b1"), OrderingKey: "B"})
		u1 := p.Publish(ctx, &Message{Data: []byte("u1")})
		mustGet(t, b1)
		mustGet(t, u1)
		if got := e.calls(); got != 3 {
			t.Fatalf("%d calls, want 3 (a1, b1, u1)", got)
		}

		p.ResumePublish("A")
		a5 := p.Publish(ctx, &Message{Data: []byte("a5"), OrderingKey: "A"})
		mustGet(t, a5)
		if st := p.Stats(); st.Failed != 3 || st.Published != 3 || st.OutstandingMessages != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A paused key's open batch (not yet closed when the failure came) fails
// too, and Close is not held up by paused keys.
func TestPauseFailsOpenBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.SetLatency("Publish", 10*time.Millisecond)
		e.srv.FailNext("Publish", 1, codes.NotFound)
		p := e.publisher(t, Config{EnableOrdering: true, Delay: 50 * time.Millisecond})
		ctx := context.Background()
		a1 := p.Publish(ctx, &Message{Data: []byte("a1"), OrderingKey: "A"})
		time.Sleep(51 * time.Millisecond) // a1's batch is closed and in flight
		a2 := p.Publish(ctx, &Message{Data: []byte("a2"), OrderingKey: "A"})
		time.Sleep(20 * time.Millisecond) // a1 failed; a2's batch is still open
		synctest.Wait()
		if _, err := a1.Get(ctx); status.Code(err) != codes.NotFound {
			t.Fatalf("a1: %v", err)
		}
		if _, err := a2.Get(ctx); !errors.Is(err, ErrPaused) {
			t.Fatalf("a2: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
