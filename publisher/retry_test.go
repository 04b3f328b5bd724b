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
		// Backoffs of at least 50, 100 and 200 ms (half of 100, 200, 400).
		if d := time.Since(start); d < 350*time.Millisecond || d > 800*time.Millisecond {
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
		if d := time.Since(start); d > 2*time.Second+DefaultDelay {
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

func TestDefaultRetryable(t *testing.T) {
	for code, want := range map[codes.Code]bool{
		codes.Unavailable: true, codes.Internal: true, codes.ResourceExhausted: true, codes.Aborted: true,
		codes.DeadlineExceeded: true, codes.Unknown: true, codes.Canceled: true,
		codes.NotFound: false, codes.PermissionDenied: false, codes.InvalidArgument: false,
		codes.FailedPrecondition: false, codes.Unauthenticated: false,
	} {
		if got := DefaultRetryable(status.Error(code, "x")); got != want {
			t.Errorf("%v: %v, want %v", code, got, want)
		}
	}
	if DefaultRetryable(context.Canceled) || DefaultRetryable(context.DeadlineExceeded) {
		t.Error("context errors must be final")
	}
}
