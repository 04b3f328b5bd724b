package ack

import (
	"slices"

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
	hint  int   // capacity for the next arrays (the last request's size)
}

func (b *batch) add(id string, t Tag) {
	if b.ids == nil { // allocated on first use: ModackTags may adopt instead
		b.ids = make([]string, 0, min(max(b.hint, 16), ackids.MaxIDs))
		b.tags = make([]Tag, 0, cap(b.ids))
	}
	b.ids = append(b.ids, id)
	b.tags = append(b.tags, t)
	b.bytes += ackids.EncodedSize(id)
}

// grow makes room for n more ids at once (append's growth policy, one
// copy instead of a chain of doublings).
func (b *batch) grow(n int) {
	b.ids = slices.Grow(b.ids, n)
	b.tags = slices.Grow(b.tags, n)
}

// adopt makes ids and tags (parallel, the caller's no more) the empty
// batch's contents. Capped at their length, so that a later add copies
// them rather than write past their end into an array a caller may have
// cut them from.
func (b *batch) adopt(ids []string, tags []Tag) {
	n := len(ids)
	b.ids, b.tags, b.bytes = ids[:n:n], tags[:n:n], 0
	for _, id := range ids {
		b.bytes += ackids.EncodedSize(id)
	}
}

// full reports whether a whole request's worth is waiting.
func (b *batch) full() bool { return len(b.ids) >= ackids.MaxIDs || b.bytes > budget }

// reset empties the batch; capHint sizes the next arrays, made when the
// next id comes (the arrays of sent ids belong to their requests now).
func (b *batch) reset(capHint int) {
	b.ids, b.tags, b.hint = nil, nil, capHint
	b.bytes = 0
	b.flush = false
}
