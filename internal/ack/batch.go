package ack

import (
	"github.com/pubsubflow/pubsubflow/internal/ackids"
)

// kind is the RPC an ack id goes out with; each has its own in-flight
// bound, so slow acks never hold back deadline extensions.
type kind uint8

const (
	kindAck kind = iota
	kindModack
	numKinds
)

// batchKey identifies ack ids that can share a request.
type batchKey struct {
	kind    kind
	seconds int32 // ModifyAckDeadline seconds
	nack    bool  // reported as nacks (event.Nack)
	eo      bool  // exactly-once: results, per-id failures, long retries
}

// counts reports whether the server releases the message's flow budget
// when it receives this ack id (an ack or an immediate nack).
func (k batchKey) counts() bool { return k.kind == kindAck || k.seconds == 0 }

// batch accumulates ack ids for one key. ids is only ever appended to or
// cut from the front, and requests keep cap-limited prefixes of it, so
// later appends never touch an id slice a request is sending.
type batch struct {
	key   batchKey
	ids   []string
	tags  []Tag // parallel to ids (nil entries: nobody listens)
	bytes int   // encoded size of ids
	flush bool  // send everything, partial chunks included
}

func (b *batch) add(id string, t Tag) {
	b.ids = append(b.ids, id)
	b.tags = append(b.tags, t)
	b.bytes += ackids.EncodedSize(id)
}

// full reports whether a whole request's worth is waiting.
func (b *batch) full() bool { return len(b.ids) >= ackids.MaxIDs || b.bytes > budget }

// reset empties the batch; capHint sizes the next id slice (the arrays of
// sent ids belong to their requests now).
func (b *batch) reset(capHint int) {
	b.ids = make([]string, 0, min(max(capHint, 16), ackids.MaxIDs))
	b.tags = make([]Tag, 0, cap(b.ids))
	b.bytes = 0
	b.flush = false
}
