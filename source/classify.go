package source

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/internal/retry"
)

// Failure describes why a stream ended, for a classifier.
type Failure struct {
	// Err is the error the stream ended with: a gRPC status error, or
	// io.EOF for a stream the server closed without a status.
	Err error
	// Code is status.Code(Err); codes.OK for io.EOF.
	Code codes.Code
	// Attempt counts consecutive failures since the last healthy stream, 1
	// for the first.
	Attempt int
	// Previous is the failure before this one in the same run (nil when
	// Attempt is 1).
	Previous error
}

// Classifier decides whether a failed stream is reopened (true) or ends
// the source (false). It is called on the failing stream's goroutine.
type Classifier func(f Failure) bool

// DefaultClassifier is the documented restart policy. It reopens the
// stream (true) for:
//
//   - the transient codes every RPC of the library retries (internal/retry:
//     UNAVAILABLE, DEADLINE_EXCEEDED — also a heartbeat timeout —,
//     INTERNAL, RESOURCE_EXHAUSTED, ABORTED, UNKNOWN, and CANCELLED by the
//     server), and a stream the server closed without a status (io.EOF, OK);
//   - UNAUTHENTICATED once, since the token may have expired in flight
//     (connections made by pubsubflow.Dial then fetch a fresh one);
//     UNAUTHENTICATED right after UNAUTHENTICATED is terminal.
//
// It ends the source (false) for a received message larger than the
// connection's receive limit (see ReceiveTooLargeError: every retry would
// receive it again), and for everything else, notably NOT_FOUND,
// PERMISSION_DENIED, INVALID_ARGUMENT and FAILED_PRECONDITION.
func DefaultClassifier(f Failure) bool {
	switch {
	case errors.Is(f.Err, io.EOF) || f.Code == codes.OK:
		return true
	case isReceiveTooLarge(f.Err):
		return false
	case f.Code == codes.Unauthenticated:
		return status.Code(f.Previous) != codes.Unauthenticated
	}
	return retry.TransientCode(f.Code)
}

// failure builds the Failure of err after attempt consecutive failures.
func failure(err error, attempt int, prev error) Failure {
	code := status.Code(err)
	if errors.Is(err, io.EOF) {
		code = codes.OK
	}
	return Failure{Err: err, Code: code, Attempt: attempt, Previous: prev}
}

// ReceiveTooLargeError explains a stream that failed because a message the
// service sent is larger than the receive limit of the caller's
// grpc.ClientConn (gRPC's default is 4 MiB; the service sends up to 10 MB).
// It wraps the gRPC error, so status.Code still reports RESOURCE_EXHAUSTED.
type ReceiveTooLargeError struct{ Err error }

// Error names the option to raise.
func (e *ReceiveTooLargeError) Error() string {
	return fmt.Sprintf("a received message exceeds this connection's receive limit; the service sends messages up to 10 MB: "+
		"dial with grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(%d)) (as pubsubflow.Dial does): %v", limits.MaxReceiveMessageBytes, e.Err)
}

// Unwrap returns the gRPC error.
func (e *ReceiveTooLargeError) Unwrap() error { return e.Err }

// isReceiveTooLarge reports whether err is gRPC's own RESOURCE_EXHAUSTED
// for a received message over the client's limit, not the server's.
func isReceiveTooLarge(err error) bool {
	var tl *ReceiveTooLargeError
	if errors.As(err, &tl) {
		return true
	}
	var fs *fromServer
	if errors.As(err, &fs) {
		return false
	}
	return sizeErrorText(err)
}

// sizeErrorText reports whether err is a RESOURCE_EXHAUSTED status whose
// message reads like one of grpc-go's receive-size errors (rpc_util.go).
func sizeErrorText(err error) bool {
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.ResourceExhausted {
		return false
	}
	m := s.Message()
	return strings.HasPrefix(m, "grpc: received message larger than max") ||
		strings.HasPrefix(m, "grpc: received message after decompression larger than max") ||
		strings.HasPrefix(m, "grpc: message after decompression larger than max")
}

// explain makes a terminal error say what it means: a *ReceiveTooLargeError
// names the option to raise, and io.EOF becomes the UNAVAILABLE it means.
func explain(err error) error {
	var tl *ReceiveTooLargeError
	switch {
	case isReceiveTooLarge(err) && !errors.As(err, &tl):
		return &ReceiveTooLargeError{Err: err}
	case errors.Is(err, io.EOF):
		return status.Error(codes.Unavailable, "stream closed by the server without a status")
	}
	return err
}

// fromServer marks a status the server sent with the text of a gRPC
// receive-size error, so it is classified by its code; status.Code,
// errors.Is and errors.As see the status through it.
type fromServer struct{ err error }

func (e *fromServer) Error() string              { return e.err.Error() }
func (e *fromServer) Unwrap() error              { return e.err }
func (e *fromServer) GRPCStatus() *status.Status { return status.Convert(e.err) }

// serverOrigin marks err, from the stream's Recv, as the server's when its
// text reads like grpc-go's own receive-size error but the stream shows
// the server sent it. grpc-go raises that error after the response headers
// and resets the stream before any trailers, so a status with no headers
// (trailers-only) or with trailer metadata is the server's. A server status
// after headers with bare trailers cannot be told apart and is taken for
// the client's.
func serverOrigin(stream grpc.ClientStream, err error) error {
	if err == nil || !sizeErrorText(err) {
		return err
	}
	if hdr, _ := stream.Header(); hdr == nil || len(stream.Trailer()) > 0 {
		return &fromServer{err: err}
	}
	return err
}
