package publisher

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// At the flow-control limit Publish blocks until a batch settles and frees
// room, in FIFO order, and gives up when its context is done.
func TestFlowControlBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.SetLatency("Publish", time.Second)
		p := e.publisher(t, Config{MaxMessages: 1, Flow: FlowConfig{MaxMessages: 2}})
		ctx := context.Background()
		r1 := p.Publish(ctx, msg(1))
		r2 := p.Publish(ctx, msg(2))
		var r3 *Result
		done := make(chan struct{})
		go func() {
			defer close(done)
			r3 = p.Publish(ctx, msg(3))
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the third Publish did not block at the limit of 2")
		default:
		}
		if st := p.Stats(); st.OutstandingMessages != 2 {
			t.Fatalf("outstanding %d", st.OutstandingMessages)
		}
		// A second waiter whose context ends gives up without a permit.
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if _, err := p.Publish(cctx, msg(4)).Get(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled waiter: %v", err)
		}
		time.Sleep(600 * time.Millisecond) // the first batches settle at 1 s
		<-done
		mustGet(t, r1)
		mustGet(t, r2)
		mustGet(t, r3)
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if st := p.Stats(); st.OutstandingMessages != 0 || st.OutstandingBytes != 0 {
			t.Fatalf("outstanding after flush: %+v", st)
		}
	})
}

// With FailFast, Publish at the limit fails at once with ErrFlowControlled,
// by messages or by bytes.
func TestFlowControlFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.SetLatency("Publish", time.Second)
		p := e.publisher(t, Config{Flow: FlowConfig{MaxMessages: 2, MaxBytes: 1000, FailFast: true}})
		ctx := context.Background()
		r1 := p.Publish(ctx, msg(1))
		r2 := p.Publish(ctx, msg(2))
		r3 := p.Publish(ctx, msg(3))
		if !settled(r3) {
			t.Fatal("fail-fast Publish did not settle at once")
		}
		if _, err := r3.Get(ctx); !errors.Is(err, ErrFlowControlled) {
			t.Fatalf("got %v, want ErrFlowControlled", err)
		}
		mustGet(t, r1)
		mustGet(t, r2)
		// Bytes: 600 + 600 > 1000.
		big := &Message{Data: bytes.Repeat([]byte("x"), 600)}
		b1 := p.Publish(ctx, big)
		if _, err := p.Publish(ctx, big).Get(ctx); !errors.Is(err, ErrFlowControlled) {
			t.Fatalf("bytes limit: %v", err)
		}
		mustGet(t, b1)
	})
}

// Unlimited turns a flow-control limit off: a config with it is valid, and
// its count admits far past the default limits (10,000 messages, 100 MiB).
func TestFlowControlUnlimited(t *testing.T) {
	c := Config{Flow: FlowConfig{MaxMessages: Unlimited, MaxBytes: Unlimited, FailFast: true}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	q := newFlowQueue(c.withDefaults().Flow)
	for i := range 20_000 {
		if !q.tryAcquire(limits.MaxDataBytes) {
			t.Fatalf("message %d (%d bytes outstanding) refused", i, q.fc.bytes.Load())
		}
	}
}

// A message larger than the byte limit is admitted when nothing else is
// outstanding, so it cannot wait forever.
func TestFlowControlAdmitsOversizeAlone(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(t, Config{Flow: FlowConfig{MaxBytes: 100, FailFast: true}})
	mustGet(t, p.Publish(context.Background(), &Message{Data: bytes.Repeat([]byte("x"), 500)}))
}
