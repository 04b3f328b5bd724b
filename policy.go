package pubsubflow

import (
	"time"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/source"
)

// LeaseStrategy chooses the ack deadline a Subscriber requests when it
// extends a message's lease, and how often it looks at the leases:
// AdaptiveLease (the default) or FixedLease. One value may configure
// several subscribers; each keeps its own state.
type LeaseStrategy = flow.Strategy

// AdaptiveLease requests the 99th percentile of the receipt→ack latencies
// seen so far (in whole seconds, as Google's clients do), clamped to
// [lo, hi]; before the first ack, the stream ack deadline clamped likewise.
// It looks at the leases every quarter of the current deadline. Zero lo
// means 10 s and zero hi 600 s; lo must be at least 1 s and hi at most
// 600 s.
func AdaptiveLease(lo, hi time.Duration) LeaseStrategy {
	return flow.Adaptive(flow.AdaptiveConfig{Min: lo, Max: hi})
}

// FixedLease requests deadline every time and looks at the leases every
// interval, extending those that would otherwise expire before the next
// look. interval must be shorter than deadline (a quarter of it or less is
// sensible); deadline is rounded up to whole seconds and must be 1–600 s.
func FixedLease(interval, deadline time.Duration) LeaseStrategy {
	return flow.Fixed(interval, deadline)
}

// StreamFailure describes why a StreamingPull stream ended, for
// SubscriberConfig.Reconnect: the error (a gRPC status, or io.EOF for a
// stream the server closed without one), its code, how many consecutive
// failures it ends (1 for the first since the last healthy stream), and
// the failure before it.
type StreamFailure = source.Failure

// DefaultReconnect is the default reconnect policy. It reconnects on the
// codes every RPC of the library treats as transient (UNAVAILABLE,
// DEADLINE_EXCEEDED — also a heartbeat timeout —, INTERNAL,
// RESOURCE_EXHAUSTED, ABORTED, UNKNOWN, CANCELLED by the server), on a
// stream closed without a status, and once on UNAUTHENTICATED (a token
// that expired in flight; connect.Dial's connections then fetch a fresh
// one). It ends Run on everything else — NOT_FOUND, PERMISSION_DENIED,
// INVALID_ARGUMENT, FAILED_PRECONDITION — and on a message larger than the
// connection's receive limit (ReceiveTooLargeError), which no retry fixes.
func DefaultReconnect(f StreamFailure) bool { return source.DefaultClassifier(f) }

// UnreachableError ends Run (and pipelines from Source) when the streams
// kept failing to connect for SubscriberConfig.ReconnectTimeout without
// one healthy stream. It carries the last status: errors.As finds it, and
// status.Code of the error reports the last failure's code.
type UnreachableError = source.UnreachableError

// ReceiveTooLargeError ends Run when the service sent a message larger
// than the connection's receive limit (gRPC's default is 4 MiB; the
// service sends messages of up to 10 MB; connect.Dial allows 20 MiB). Dial
// with grpc.MaxCallRecvMsgSize of at least 20 MiB. It wraps the gRPC
// error, so status.Code still reports RESOURCE_EXHAUSTED.
type ReceiveTooLargeError = source.ReceiveTooLargeError
