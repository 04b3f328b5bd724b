package source

import (
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestDefaultClassifier(t *testing.T) {
	unauth := status.Error(codes.Unauthenticated, "")
	for _, c := range []struct {
		err     error
		attempt int
		want    bool
		prev    error
	}{
		{io.EOF, 1, true, nil},
		{status.Error(codes.Unavailable, ""), 5, true, nil},
		{status.Error(codes.DeadlineExceeded, ""), 1, true, nil},
		{status.Error(codes.Internal, ""), 1, true, nil},
		{status.Error(codes.ResourceExhausted, ""), 1, true, nil},
		{status.Error(codes.Aborted, ""), 1, true, nil},
		{status.Error(codes.Unknown, ""), 1, true, nil},
		{unauth, 1, true, nil},
		{unauth, 3, true, status.Error(codes.Unavailable, "")},
		{unauth, 2, false, unauth},
		{status.Error(codes.NotFound, ""), 1, false, nil},
		{status.Error(codes.PermissionDenied, ""), 1, false, nil},
		{status.Error(codes.InvalidArgument, ""), 1, false, nil},
		{status.Error(codes.FailedPrecondition, ""), 1, false, nil},
	} {
		if got := DefaultClassifier(failure(c.err, c.attempt, c.prev)); got != c.want {
			t.Errorf("%v (attempt %d): %v, want %v", c.err, c.attempt, got, c.want)
		}
	}
}
