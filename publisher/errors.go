package publisher

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors a Result may resolve to before any RPC is made.
var (
	// ErrClosed: Publish after Close (or while it runs).
	ErrClosed = errors.New("publisher: closed")
	// ErrPaused is matched (errors.Is) by a *PausedError.
	ErrPaused = errors.New("publisher: ordering key paused after a failed publish; call ResumePublish")
	// ErrFlowControlled: the flow-control limit was reached and
	// Config.Flow.FailFast is set.
	ErrFlowControlled = errors.New("publisher: flow control limit reached")
	// ErrOrderingDisabled: a message has an ordering key but
	// Config.EnableOrdering is false.
	ErrOrderingDisabled = errors.New("publisher: message has an ordering key but Config.EnableOrdering is false")
	// ErrEmptyMessage: a message has neither data nor attributes, which the
	// service refuses (it would fail the whole batch).
	ErrEmptyMessage = errors.New("publisher: message has neither data nor attributes")
	// ErrMessageTooLarge: a message does not fit in one Publish request
	// (MaxRequestBytes).
	ErrMessageTooLarge = errors.New("publisher: message exceeds the request size limit")
	// ErrNilMessage: Publish(nil), or a Stage conversion returned nil.
	ErrNilMessage = errors.New("publisher: nil message")
	// ErrInvalidMessage is matched (errors.Is) by an *InvalidMessageError.
	ErrInvalidMessage = errors.New("publisher: invalid message")
)

// InvalidMessageError is the error of a message that breaks one of the
// service's limits (data size, attribute count, key and value sizes, UTF-8,
// the reserved "goog" prefix, ordering key size) or that could not be
// encoded. Such a message is refused before it is queued, so it never
// fails the other messages of a batch and is never retried; the gRPC code
// is INVALID_ARGUMENT. errors.Is matches ErrInvalidMessage, and also
// ErrEmptyMessage or ErrMessageTooLarge for those two faults.
type InvalidMessageError struct {
	// Index is the message's position among the Publish calls of its
	// Publisher, from 0, so a log line can be matched to its input; -1
	// when the fault was found at send time.
	Index int64
	// OrderingKey is the message's ordering key ("" for none).
	OrderingKey string
	// Limit names the broken rule, e.g. "attribute value size"; Field the
	// message field, e.g. Attributes["k"]; Detail what was found.
	Limit, Field, Detail string
	// Err is the encoding error for a message that could not be encoded.
	Err error
}

// Error names the message, its index, the field and the limit.
func (e *InvalidMessageError) Error() string {
	who := fmt.Sprintf("message #%d", e.Index)
	if e.Index < 0 {
		who = "message"
	}
	if k := e.OrderingKey; k != "" {
		if len(k) > 64 {
			k = k[:64] + "…" // a 2,000-byte key would drown the message
		}
		who += fmt.Sprintf(" (ordering key %q)", k)
	}
	msg := fmt.Sprintf("publisher: %s: %s: %s: %s", who, e.Field, e.Limit, e.Detail)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrInvalidMessage, and ErrEmptyMessage or ErrMessageTooLarge
// for those faults.
func (e *InvalidMessageError) Is(target error) bool {
	switch target {
	case ErrInvalidMessage:
		return true
	case ErrEmptyMessage:
		return e.Limit == "empty message"
	case ErrMessageTooLarge:
		return e.Limit == "message size" || e.Limit == "request size"
	}
	return false
}

// Unwrap returns the encoding error, if any.
func (e *InvalidMessageError) Unwrap() error { return e.Err }

// GRPCStatus makes status.Code report INVALID_ARGUMENT.
func (e *InvalidMessageError) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, e.Error())
}

// isEncodingError reports a request the client could not encode (gRPC
// wraps the codec's error in INTERNAL, a code otherwise retried): no retry
// can fix it.
func isEncodingError(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Internal && strings.Contains(s.Message(), "error while marshaling")
}

// PausedError is the error of a message whose ordering key is paused: the
// message was queued behind a batch of the same key that failed, or was
// published after that failure and before ResumePublish. Cause is the
// failure that paused the key. errors.Is(err, ErrPaused) holds; the gRPC
// code of a PausedError is FAILED_PRECONDITION, not Cause's, so that
// callers do not retry a paused key blindly.
type PausedError struct {
	Key   string
	Cause error
}

// Error implements error.
func (e *PausedError) Error() string {
	return fmt.Sprintf("publisher: ordering key %q paused after a failed publish (call ResumePublish): %v", e.Key, e.Cause)
}

// Is reports ErrPaused.
func (e *PausedError) Is(target error) bool { return target == ErrPaused }

// Unwrap returns the failure that paused the key.
func (e *PausedError) Unwrap() error { return e.Cause }

// GRPCStatus makes status.Code report FAILED_PRECONDITION.
func (e *PausedError) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Error())
}

// retryableCodes are the transient Publish failures, as Google's clients
// classify them.
var retryableCodes = map[codes.Code]bool{
	codes.Aborted:           true,
	codes.Canceled:          true, // by the server or a proxy; our own cancellation is checked first
	codes.DeadlineExceeded:  true,
	codes.Internal:          true,
	codes.ResourceExhausted: true,
	codes.Unavailable:       true,
	codes.Unknown:           true,
}

// DefaultRetryable is the default Config.Retryable: ABORTED, CANCELLED,
// DEADLINE_EXCEEDED, INTERNAL, RESOURCE_EXHAUSTED, UNAVAILABLE and UNKNOWN
// are transient; everything else (NOT_FOUND, PERMISSION_DENIED,
// INVALID_ARGUMENT, …) is final. A plain context error is final.
func DefaultRetryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	s, ok := status.FromError(err)
	return ok && retryableCodes[s.Code()]
}
