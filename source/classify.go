package source

import (
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Action is a Classifier's verdict on a stream failure.
type Action int

const (
	// Retry reopens the stream after the next Backoff delay.
	Retry Action = iota
	// Terminate ends the source with the failure.
	Terminate
)

// String returns "retry" or "terminate".
func (a Action) String() string {
	if a == Retry {
		return "retry"
	}
	return "terminate"
}

// Failure describes why a stream ended, for a Classifier.
type Failure struct {
	// Err is the error the stream ended with: a gRPC status error, or
	// io.EOF for a stream the server closed without a status.
	Err error
	// Code is status.Code(Err); codes.OK for io.EOF.
	Code codes.Code
	// Attempt counts consecutive failures since the last healthy stream (a
	// stream that received a response), 1 for the first.
	Attempt int
	// Previous is the failure before this one in the same run of
	// consecutive failures (nil when Attempt is 1).
	Previous error
}

// Classifier decides whether a failed stream is reopened or ends the
// source. It is called on the failing stream's goroutine.
type Classifier func(f Failure) Action

// DefaultClassifier is the documented restart policy:
//
//   - Retry: DEADLINE_EXCEEDED (also a heartbeat timeout), UNAVAILABLE,
//     INTERNAL, RESOURCE_EXHAUSTED, ABORTED, UNKNOWN, and a stream the
//     server closed without a status (io.EOF, or OK).
//   - Retry once: UNAUTHENTICATED, since the token may have expired or been
//     revoked in flight; connections made by connect.Dial drop their cached
//     token when a call fails with UNAUTHENTICATED, so the retry carries a
//     fresh one. UNAUTHENTICATED right after UNAUTHENTICATED is terminal.
//   - Terminate: everything else, notably NOT_FOUND, PERMISSION_DENIED,
//     INVALID_ARGUMENT and FAILED_PRECONDITION, which a retry cannot fix.
func DefaultClassifier(f Failure) Action {
	if errors.Is(f.Err, io.EOF) {
		return Retry
	}
	switch f.Code {
	case codes.OK, codes.DeadlineExceeded, codes.Unavailable, codes.Internal,
		codes.ResourceExhausted, codes.Aborted, codes.Unknown:
		return Retry
	case codes.Unauthenticated:
		if status.Code(f.Previous) != codes.Unauthenticated {
			return Retry
		}
	}
	return Terminate
}

// failure builds the Failure of err after attempt consecutive failures,
// prev being the one before (nil if none).
func failure(err error, attempt int, prev error) Failure {
	code := status.Code(err)
	if errors.Is(err, io.EOF) {
		code = codes.OK
	}
	return Failure{Err: err, Code: code, Attempt: attempt, Previous: prev}
}
