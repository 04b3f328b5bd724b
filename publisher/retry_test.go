package publisher

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// Transient failures are retried with backoff until the publish succeeds.
func TestRetryTransientErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.FailNext("Publish", 3, codes.Unavailable)
		p := e.publisher(t, Config{})
		start := time.Now()
		mustGet(t, p.Publish(context.Background(), msg(1)))
		if got := e.calls(); got != 4 {
			t.Fatalf("%d calls, want 4", got)
		}
		if st := p.Stats(); st.Retries != 3 || st.Published != 1 {
			t.Fatalf("stats %+v", st)
		}
		// Three pauses of at most 100, 200 and 400 ms (BackoffMin doubling),
		// after the batch's 10 ms Delay.
		if d := time.Since(start); d > defaultDelay+700*time.Millisecond {
			t.Fatalf("took %v", d)
		}
	})
}

// Retries stop at the retry deadline; the error keeps its gRPC code.
func TestRetryDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.FailNext("Publish", 1_000_000, codes.Unavailable)
		p := e.publisher(t, Config{RetryDeadline: 2 * time.Second, BackoffMax: 400 * time.Millisecond})
		start := time.Now()
		_, err := p.Publish(context.Background(), msg(1)).Get(context.Background())
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, want Unavailable", err)
		}
		if d := time.Since(start); d > 2*time.Second+defaultDelay {
			t.Fatalf("gave up after %v, past the 2 s deadline", d)
		}
		if e.calls() < 4 {
			t.Fatalf("only %d calls", e.calls())
		}
	})
}

// A final error is not retried.
func TestNonRetryableNotRetried(t *testing.T) {
	e := newEnv(t)
	e.srv.FailNext("Publish", 1, codes.InvalidArgument)
	p := e.publisher(t, Config{})
	_, err := p.Publish(context.Background(), msg(1)).Get(context.Background())
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v", err)
	}
	if got := e.calls(); got != 1 {
		t.Fatalf("%d calls", got)
	}
	// The next publish is unaffected (unordered messages never pause).
	mustGet(t, p.Publish(context.Background(), msg(2)))
}

// Config.Retryable replaces the retry policy: here a transient code is
// final and a final one is retried.
func TestRetryableReplacesPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		p := e.publisher(t, Config{Retryable: func(err error) bool { return status.Code(err) == codes.NotFound }})
		e.srv.FailNext("Publish", 1, codes.Unavailable)
		if _, err := p.Publish(context.Background(), msg(1)).Get(context.Background()); status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, want Unavailable, not retried", err)
		}
		e.srv.FailNext("Publish", 2, codes.NotFound)
		mustGet(t, p.Publish(context.Background(), msg(2)))
		if got, st := e.calls(), p.Stats(); got != 4 || st.Retries != 2 {
			t.Fatalf("%d calls, %d retries; want 4 and 2", got, st.Retries)
		}
	})
}
