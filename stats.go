package pubsubflow

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats is a snapshot of a Subscriber's pressure, with each message state
// kept apart. Received − settled (Acked, Nacked, NoOps, Expired and
// AckRefused) = Buffered + Processing = Outstanding.
type Stats struct {
	// Outstanding and OutstandingBytes are what flow control counts: every
	// received message that is not settled, counted the moment its
	// response was decoded.
	Outstanding      int64
	OutstandingBytes int64
	// Leases is the number of messages whose deadline is being extended.
	Leases int
	// Buffered messages were received but are not in processing yet
	// (waiting in the subscriber's hand-off or for a worker); Processing
	// messages are inside Run's handlers (or, for a pipeline built on
	// Source, have left the source) and are not settled yet.
	Buffered   int64
	Processing int64
	// Acking messages were acked and their ack is not yet final (sent and
	// confirmed, or failed for good); their leases are still extended.
	Acking int64
	// Totals since the subscriber started.
	Received    uint64
	Redelivered uint64 // received with a delivery attempt above 1
	// Acked counts the acks the server accepted and those on their way
	// (Acking). An ack the server refused, or that could not be sent
	// before a shutdown's deadline, counts in AckRefused and AckFailures;
	// one that could not leave before the message's deadline, in Expired.
	Acked       uint64
	Nacked      uint64
	NoOps       uint64
	Expired     uint64
	Extended    uint64
	Reconnects  uint64
	AckFailures uint64 // acks and nacks that failed for good
	AckRefused  uint64 // of AckFailures, the acks: settled, but not acked
	// EmptyAckIDs, DuplicateAckIDs and MissingMessages count response
	// elements refused on receipt, before any bookkeeping, from a
	// misbehaving server or proxy: no ack id (dropped); an ack id within a
	// response or already held (the copy dropped, neither acked nor
	// nacked: the held copy answers for it; once that one is settled the
	// ack id is accepted again); an ack id without a message (nacked). No
	// handler sees them.
	EmptyAckIDs, DuplicateAckIDs, MissingMessages uint64
	// OverGrant counts messages a server sent a stream past the flow
	// control its initial request asked for, warned once per stream.
	// Both budgets stop the reading, so what goes over is at most one
	// response per stream.
	OverGrant uint64
	// StreamsLost counts messages that went into a go-streams sub-graph
	// (Streams) and had not come out within its Hold, settled then with
	// its Lost outcome.
	StreamsLost uint64
	// AckDeadline is the current lease deadline.
	AckDeadline time.Duration
	// LastError is the most recent stream, lease or ack error.
	LastError error
}

// counters are what only the Subscriber counts: handlers running, and
// messages handed to processing (and of those, settled); the rest comes
// from its parts' Stats.
type counters struct {
	inHandler, handed, settledHanded atomic.Int64
	streamsLost                      atomic.Uint64 // settled by a Streams Hold

	mu      sync.Mutex
	lastErr error // a handler's panic
}

func (c *counters) setErr(err error) {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}

func (c *counters) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}
