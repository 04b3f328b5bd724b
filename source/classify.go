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
	// Attempt counts consecutive failures since the last healthy stream (a
	// stream that delivered a message or stayed open 10 s), 1 for the
	// first.
	Attempt int
	// Previous is the failure before this one in the same run of
	// consecutive failures (nil when Attempt is 1).
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
//     server: the source's own cancellation ends it before it asks), and a
//     stream the server closed without a status (io.EOF, or OK);
//   - UNAUTHENTICATED once, since the token may have expired or been
//     revoked in flight; connections made by pubsubflow.Dial drop their cached
//     token when a call fails with UNAUTHENTICATED, so the retry carries a
//     fresh one. UNAUTHENTICATED right after UNAUTHENTICATED is terminal.
//
// It ends the source (false) for a received message larger than the
// connection's own receive limit (RESOURCE_EXHAUSTED raised by the client,
// see ReceiveTooLargeError: every retry would receive the same message;
// a status the server sent with the same text is the server's, and
// retried), and for everything else, notably NOT_FOUND, PERMISSION_DENIED,
// INVALID_ARGUMENT and FAILED_PRECONDITION, which a retry cannot fix.
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

// failure builds the Failure of err after attempt consecutive failures,
// prev being the one before (nil if none).
func failure(err error, attempt int, prev error) Failure {
	code := status.Code(err)
	if errors.Is(err, io.EOF) {
		code = codes.OK
	}
	return Failure{Err: err, Code: code, Attempt: attempt, Previous: prev}
}

// ReceiveTooLargeError explains a stream that failed because a message the
// service sent is larger than the receive limit of the caller's
// grpc.ClientConn (gRPC's default is 4 MiB; the service sends messages of
// up to 10 MB). It wraps the gRPC error, so status.Code still reports
// RESOURCE_EXHAUSTED.
type ReceiveTooLargeError struct{ Err error }

// Error names the option to raise.
func (e *ReceiveTooLargeError) Error() string {
	return fmt.Sprintf("a received message exceeds this connection's receive limit; the service sends messages up to 10 MB: "+
		"dial with grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(%d)) (as pubsubflow.Dial does): %v", limits.MaxReceiveMessageBytes, e.Err)
}

// Unwrap returns the gRPC error.
func (e *ReceiveTooLargeError) Unwrap() error { return e.Err }

// isReceiveTooLarge reports whether err is gRPC's RESOURCE_EXHAUSTED for a
// received message over the client's receive limit (raised by the client
// itself, not a quota of the service): a *ReceiveTooLargeError, or a
// status with gRPC's text that serverOrigin did not mark as the server's.
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
// message reads like one of gRPC's own receive-size errors (grpc-go's
// rpc_util.go). The text alone does not say who raised it: see
// serverOrigin.
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

// explain returns err as a *ReceiveTooLargeError when it is one, so the
// terminal error names the option to raise, and a stream closed without a
// status (io.EOF) as the UNAVAILABLE status it means; other errors are
// unchanged.
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

// fromServer marks a status the server sent whose message reads like one
// of gRPC's own receive-size errors, so that nothing takes it for the
// client's: it is classified by its code, as any other status of the
// server (RESOURCE_EXHAUSTED is retried). Otherwise it is the status:
// status.Code and status.FromError see it unchanged (GRPCStatus), and
// errors.Is and errors.As reach it (Unwrap).
type fromServer struct{ err error }

func (e *fromServer) Error() string              { return e.err.Error() }
func (e *fromServer) Unwrap() error              { return e.err }
func (e *fromServer) GRPCStatus() *status.Status { return status.Convert(e.err) }

// serverOrigin returns err, an error stream's Recv returned, marked as
// the server's (fromServer) when its text reads like gRPC's own
// receive-size error but the stream shows the server sent it.
//
// grpc-go raises that error in the client (parser.recvMsg in rpc_util.go,
// from csAttempt.recvMsg) on reading the 5-byte header of a message frame
// longer than the call's receive limit, and then resets the stream: the
// server's response headers had arrived (a message frame cannot come
// before them), and its trailers had not (closeStream keeps none for a
// stream the client ends). A status the server sends arrives in its
// trailers instead, or as a trailers-only answer when it sent no headers.
// So the status is the server's when
//
//   - there were no response headers (Header returns nil: a trailers-only
//     answer), or
//   - the trailers carry metadata: any entry, status details
//     (grpc-status-details-bin, such as AIP-193's ErrorInfo, which the
//     service attaches to most errors) included.
//
// Left over is a status the server sends after its headers with nothing
// in its trailers but code and message: grpc-go exposes nothing that tells
// it from its own error, which it is then taken for. The one way the
// client's own error can pass for the server's: the server's trailers were
// read in the instant before the oversized frame was (the stream was
// ending anyway); it is then retried, and the next receipt of the same
// message ends the source as it should.
func serverOrigin(stream grpc.ClientStream, err error) error {
	if err == nil || !sizeErrorText(err) {
		return err
	}
	if hdr, _ := stream.Header(); hdr == nil || len(stream.Trailer()) > 0 {
		return &fromServer{err: err}
	}
	return err
}
