package publisher

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The Publisher's own errors, which a Result may resolve to besides the
// Publish RPC's. Match them with errors.Is.
var (
	// ErrClosed: Publish after Close or Shutdown began.
	ErrClosed = errors.New("publisher: closed")
	// ErrFlowControlled: the flow-control limit was reached and
	// Config.Flow.FailFast is set.
	ErrFlowControlled = errors.New("publisher: flow control limit reached")
	// ErrInvalidMessage: the message was never sent and is never retried
	// (an *Error with this Kind). Publish refuses it before it is queued
	// when it is nil, has an ordering key without Config.EnableOrdering,
	// or breaks one of the service's limits (empty, data size, request
	// size, attribute count, key and value sizes, UTF-8, the reserved
	// "goog" prefix, ordering key size); a message that cannot be encoded
	// when its batch is sent (it was modified after Publish) fails alone,
	// and the rest of its batch is sent.
	ErrInvalidMessage = errors.New("publisher: invalid message")
	// ErrPaused: the message's ordering key is paused (an *Error with
	// this Kind): it was queued behind a batch of the same key that
	// failed, or published after that failure and before ResumePublish.
	ErrPaused = errors.New("publisher: ordering key paused after a failed publish; call ResumePublish")
)

// Error is the error of an invalid message (Kind ErrInvalidMessage) or of
// a message whose ordering key is paused (Kind ErrPaused). errors.Is matches Kind and Err; status.Code reports
// INVALID_ARGUMENT or FAILED_PRECONDITION, never Err's code, so that a
// paused key is not retried blindly.
type Error struct {
	// Kind is ErrInvalidMessage or ErrPaused.
	Kind error
	// OrderingKey is the message's ordering key ("" for none): for
	// ErrPaused, the key to pass to ResumePublish.
	OrderingKey string
	// Detail says what is wrong with an invalid message: its index among
	// the Publisher's Publish calls (from 0, so a log line can be matched
	// to its input), the field and the limit it breaks.
	Detail string
	// Err is the cause: the failure that paused the key, or the encoding
	// error of a message that could not be encoded; nil otherwise.
	Err error
}

// Error returns the kind, the ordering key, the detail and the cause.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if k := e.OrderingKey; k != "" {
		if len(k) > 64 {
			k = k[:64] + "…" // a 2,000-byte key would drown the message
		}
		fmt.Fprintf(&b, ": ordering key %q", k)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Kind and, when set, Err.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// GRPCStatus makes status.Code report FAILED_PRECONDITION for a paused
// key and INVALID_ARGUMENT for an invalid message.
func (e *Error) GRPCStatus() *status.Status {
	code := codes.InvalidArgument
	if e.Kind == ErrPaused {
		code = codes.FailedPrecondition
	}
	return status.New(code, e.Error())
}

// invalid returns the error of an invalid message.
func invalid(key, format string, args ...any) *Error {
	return &Error{Kind: ErrInvalidMessage, OrderingKey: key, Detail: fmt.Sprintf(format, args...)}
}

// isEncodingError reports a request the client could not encode (gRPC
// wraps the codec's error in INTERNAL, a code otherwise retried): no retry
// can fix it.
func isEncodingError(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Internal && strings.Contains(s.Message(), "error while marshaling")
}
