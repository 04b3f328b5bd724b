// Package retry is the library's one retry policy for RPCs to the service:
// which gRPC status codes are transient, and the pause between attempts.
// Streams (reconnects), acks and modacks, lease extensions and publishes
// all use it, so they agree on what is worth retrying.
package retry

import (
	"context"
	"errors"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// transient are the status codes Google's clients retry: the service was
// busy, unreachable or interrupted, and the same call may succeed later.
// CANCELLED here is the server's or a proxy's; every caller checks its own
// context first, so the library's own cancellation is never retried.
var transient = map[codes.Code]bool{
	codes.Aborted:           true,
	codes.Canceled:          true,
	codes.DeadlineExceeded:  true,
	codes.Internal:          true,
	codes.ResourceExhausted: true,
	codes.Unavailable:       true,
	codes.Unknown:           true, // a transport failure without a status
}

// Transient reports whether err is worth retrying: a gRPC status with a
// transient code. Everything else (NOT_FOUND, PERMISSION_DENIED,
// INVALID_ARGUMENT, FAILED_PRECONDITION, …) is final: a retry cannot fix
// it. A plain context error is final too: it is the caller's own deadline.
func Transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	s, ok := status.FromError(err)
	return ok && TransientCode(s.Code())
}

// TransientCode reports whether code is one of the transient codes.
func TransientCode(code codes.Code) bool { return transient[code] }

// Backoff returns gax-go's exponential backoff: each Pause is drawn from
// (0, cur], cur doubling from initial up to most (full jitter, so that
// many clients retrying at once spread out). Each retrying call keeps
// its own value.
func Backoff(initial, most time.Duration) gax.Backoff {
	return gax.Backoff{Initial: initial, Max: max(most, initial), Multiplier: 2}
}
