package retry

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, ""), true},
		{status.Error(codes.DeadlineExceeded, ""), true},
		{status.Error(codes.ResourceExhausted, ""), true},
		{status.Error(codes.Aborted, ""), true},
		{status.Error(codes.Internal, ""), true},
		{status.Error(codes.Unknown, ""), true},
		{status.Error(codes.Canceled, "by the server"), true},
		{fmt.Errorf("publish: %w", status.Error(codes.Unavailable, "")), true},
		{status.Error(codes.NotFound, ""), false},
		{status.Error(codes.PermissionDenied, ""), false},
		{status.Error(codes.InvalidArgument, ""), false},
		{status.Error(codes.FailedPrecondition, ""), false},
		{context.Canceled, false},         // our own cancellation
		{context.DeadlineExceeded, false}, // our own deadline
		{io.EOF, false},                   // not a status: nothing says it is transient
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestBackoffGrowsWithinBounds(t *testing.T) {
	bo := Backoff(100*time.Millisecond, time.Second)
	var most time.Duration
	for range 200 {
		d := bo.Pause()
		if d <= 0 || d > time.Second {
			t.Fatalf("pause %v outside (0, 1s]", d)
		}
		most = max(most, d)
	}
	if most < 500*time.Millisecond {
		t.Fatalf("largest of 200 pauses %v: the cap does not grow towards 1s", most)
	}
	if b := Backoff(time.Second, time.Millisecond); b.Max != time.Second {
		t.Fatalf("a max below the initial pause: Max %v, want it raised to 1s", b.Max)
	}
}
