package pubsubflow

import (
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/stage"
)

// Stats is a snapshot of a Subscriber's pressure, with each message state
// kept apart. Received − settled (Acked, Nacked, NoOps, Expired and
// AckRefused) = Buffered + Processing = Outstanding.
type Stats struct {
	// Outstanding and OutstandingBytes are what flow control counts: the
	// received messages not settled.
	Outstanding      int64
	OutstandingBytes int64
	// Leases is the number of messages whose deadline is being extended.
	Leases int
	// Buffered messages are not processing yet; Processing ones are in
	// Run's handlers (or have left Source), not settled.
	Buffered   int64
	Processing int64
	// Acking messages were acked, the ack not yet final.
	Acking int64
	// Totals since the subscriber started.
	Received    uint64
	Redelivered uint64 // received with a delivery attempt above 1
	// Acked counts the acks accepted and on their way; an ack refused or
	// not sent counts in AckRefused and AckFailures, or in Expired.
	Acked       uint64
	Nacked      uint64
	NoOps       uint64
	Expired     uint64
	Extended    uint64
	Reconnects  uint64
	AckFailures uint64 // acks and nacks that failed for good
	AckRefused  uint64 // of AckFailures, the acks: settled, but not acked
	// EmptyAckIDs, DuplicateAckIDs and MissingMessages count response
	// elements a misbehaving server sent, refused on receipt.
	EmptyAckIDs, DuplicateAckIDs, MissingMessages uint64
	// OverGrant counts messages sent past the flow control a stream asked.
	OverGrant uint64
	// StreamsLost counts messages settled by a Streams sub-graph's Hold.
	StreamsLost uint64
	// AckDeadline is the current lease deadline.
	AckDeadline time.Duration
	// LastError is the most recent stream, lease or ack error.
	LastError error
}

// counters are what only the Subscriber counts.
type counters struct {
	inHandler, handed, settledHanded atomic.Int64
	streamsLost                      atomic.Uint64
	panicked                         atomic.Pointer[stage.PanicError] // the last handler panic
}
