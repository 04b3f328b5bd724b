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
		want    Action
		prev    error
	}{
		{io.EOF, 1, Retry, nil},
		{status.Error(codes.Unavailable, ""), 5, Retry, nil},
		{status.Error(codes.DeadlineExceeded, ""), 1, Retry, nil},
		{status.Error(codes.Internal, ""), 1, Retry, nil},
		{status.Error(codes.ResourceExhausted, ""), 1, Retry, nil},
		{status.Error(codes.Aborted, ""), 1, Retry, nil},
		{status.Error(codes.Unknown, ""), 1, Retry, nil},
		{unauth, 1, Retry, nil},
		{unauth, 3, Retry, status.Error(codes.Unavailable, "")},
		{unauth, 2, Terminate, unauth},
		{status.Error(codes.NotFound, ""), 1, Terminate, nil},
		{status.Error(codes.PermissionDenied, ""), 1, Terminate, nil},
		{status.Error(codes.InvalidArgument, ""), 1, Terminate, nil},
		{status.Error(codes.FailedPrecondition, ""), 1, Terminate, nil},
	} {
		if got := DefaultClassifier(failure(c.err, c.attempt, c.prev)); got != c.want {
			t.Errorf("%v (attempt %d): %v, want %v", c.err, c.attempt, got, c.want)
		}
	}
}
