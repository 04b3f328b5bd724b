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
	// Outstanding and OutstandingBytes are what flow control counts: every
	// received message not settled, from the moment its response was
	// decoded.
	Outstanding      int64
	OutstandingBytes int64
	// Leases is the number of messages whose deadline is being extended.
	Leases int
	// Buffered messages were received but are not processing yet;
	// Processing messages are in Run's handlers (or have left Source) and
	// are not settled.
	Buffered   int64
	Processing int64
	// Acking messages were acked and their ack is not yet final; their
	// leases are still extended.
	Acking int64
	// Totals since the subscriber started.
	Received    uint64
	Redelivered uint64 // received with a delivery attempt above 1
	// Acked counts the acks the server accepted and those on their way.
	// An ack refused, or not sent before a shutdown's deadline, counts in
	// AckRefused and AckFailures; one not sent before the message's
	// deadline, in Expired.
	Acked       uint64
	Nacked      uint64
	NoOps       uint64
	Expired     uint64
	Extended    uint64
	Reconnects  uint64
	AckFailures uint64 // acks and nacks that failed for good
	AckRefused  uint64 // of AckFailures, the acks: settled, but not acked
	// EmptyAckIDs, DuplicateAckIDs and MissingMessages count response
	// elements refused on receipt from a misbehaving server: no ack id
	// (dropped); an ack id already held (the copy dropped, the held copy
	// answers for it); an ack id without a message (nacked).
	EmptyAckIDs, DuplicateAckIDs, MissingMessages uint64
	// OverGrant counts messages a server sent past the flow control the
	// stream asked for (at most one response per stream).
	OverGrant uint64
	// StreamsLost counts messages settled by a Streams sub-graph's Hold.
	StreamsLost uint64
	// AckDeadline is the current lease deadline.
	AckDeadline time.Duration
	// LastError is the most recent stream, lease or ack error.
	LastError error
}

// counters are what only the Subscriber counts; the rest comes from its
// parts' Stats.
type counters struct {
	inHandler, handed, settledHanded atomic.Int64
	streamsLost                      atomic.Uint64
	panicked                         atomic.Pointer[stage.PanicError] // the last handler panic
}
