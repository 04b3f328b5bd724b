package publisher

import (
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pubsubflow/pubsubflow/internal/carrier"
)

// batch is one future PublishRequest: messages of one ordering key ("" for
// unordered messages). Its fields are guarded by Publisher.mu until done is
// closed; after that ids and err are read-only.
type batch struct {
	outcome   // done, and once it is closed ids, err and msgErrs
	ks        *keyState
	ordered   bool // ks.ordered(), kept here so that a sender of unordered batches reads nothing of the Publisher's
	msgs      []*pubsubpb.PubsubMessage
	n         int // messages added (msgs is dropped once done)
	bytes     int // encoded size of the messages in a request
	flowBytes int // sum of message sizes, as flow control counted them
	open      bool
	deadline  time.Time    // when Delay closes it
	spans     []*tracedMsg // the messages' spans, when tracing

	// The messages' wire messages and Results are taken from slabs, a
	// chunk at a time, not allocated one by one: msgs points into pms
	// (dropped with msgs once done), Results into rs (kept alive by the
	// Results the caller holds, and holding only b, through its outcome). A batch that takes
	// MaxMessages at once takes them from slab, a recycled wire side.
	pms  []pubsubpb.PubsubMessage
	rs   []Result
	slab *wireSlab
	// wire holds the trace contexts the messages carry, as attribute
	// entries in wire format (their unknown fields), a chunk at a time.
	wire []byte
}

// minChunk is the smallest slab chunk a batch takes.
const minChunk = 4

// wireSlab is the wire side of a batch of MaxMessages: its wire messages,
// the request's list of them, and the chunk of trace contexts they carry
// (empty when untraced). None is referenced once the batch's Publish
// returned (gRPC encodes the request before it returns; a Result reads
// only ids and errors), so a completed batch hands its slab back to
// Publisher.slabs, cleared, for a later batch: a steady load allocates
// and collects no wire messages, and no trace contexts (83 bytes a
// message, sampled or not: the largest allocation of an unsampled
// message otherwise).
type wireSlab struct {
	pms  []pubsubpb.PubsubMessage
	msgs []*pubsubpb.PubsubMessage
	wire []byte
}

// slot returns the next free wire message and Result of b, taking a new
// chunk when the last one is full: as many as the key's previous batch
// held (so a steady load takes one chunk per batch), at least minChunk and
// at least what b already holds (so a growing one takes a few), and never
// more than the batch may still take. A first chunk of maxMessages comes
// from slabs.
func (b *batch) slot(maxMessages int, slabs *sync.Pool) (*pubsubpb.PubsubMessage, *Result) {
	if len(b.pms) == cap(b.pms) {
		c := min(max(b.ks.lastN, minChunk, b.n), maxMessages-b.n)
		if b.n == 0 && c == maxMessages {
			s, _ := slabs.Get().(*wireSlab)
			if s == nil {
				s = &wireSlab{pms: make([]pubsubpb.PubsubMessage, maxMessages), msgs: make([]*pubsubpb.PubsubMessage, 0, maxMessages)}
			}
			b.slab, b.pms, b.msgs, b.wire = s, s.pms[:0], s.msgs, s.wire[:0]
		} else {
			b.pms = make([]pubsubpb.PubsubMessage, 0, c)
			if b.msgs == nil {
				b.msgs = make([]*pubsubpb.PubsubMessage, 0, c)
			}
		}
		b.rs = make([]Result, 0, c)
	}
	i := len(b.pms)
	b.pms = b.pms[:i+1] // extended in place: a proto message is not copied
	b.rs = b.rs[:i+1]
	return &b.pms[i], &b.rs[i]
}

// dropWire lets go of b's wire messages once they are no longer used
// (its Publish returned, or it will never be sent), recycling its slab.
func (b *batch) dropWire(slabs *sync.Pool) {
	if s := b.slab; s != nil {
		clear(s.pms[:len(b.pms)]) // no data, attributes or trace context kept alive
		clear(b.msgs)
		s.msgs = b.msgs[:0]
		s.wire = b.wire[:0] // the last chunk b took: its first, or a larger one
		slabs.Put(s)
	}
	b.slab, b.msgs, b.pms, b.wire = nil, nil, nil, nil
}

// carry makes pm carry the trace context sc (valid) on the wire: encoded
// attribute entries (n bytes: carrier.WireSize) set as its unknown fields,
// so no map of attributes is copied or built for it. The bytes come from
// b.wire (for a batch on a slab, the slab's chunk at first), which takes
// a new chunk, for as many messages as the key's last batch held, when
// the last one is full.
func (b *batch) carry(pm *pubsubpb.PubsubMessage, sc trace.SpanContext, n int) {
	if cap(b.wire)-len(b.wire) < n {
		b.wire = make([]byte, 0, n*max(b.ks.lastN, minChunk))
	}
	start := len(b.wire)
	b.wire = carrier.AppendWire(b.wire, sc)
	pm.ProtoReflect().SetUnknown(protoreflect.RawFields(b.wire[start:len(b.wire):len(b.wire)]))
}

// keyState is the batching state of one ordering key. The unordered
// messages share Publisher.free, whose busy and queue are unused: their
// batches go straight to the ready queue.
type keyState struct {
	key  string
	open *batch
	// busy: a batch of this key is ready or in flight; later ones wait in
	// queue so that at most one is in flight and they go out in order.
	busy   bool
	queue  []*batch
	paused *Error // Kind ErrPaused
	lastN  int    // messages in the key's last sealed batch: the next one's first chunk
}

func (ks *keyState) ordered() bool { return ks.key != "" }

// idle reports whether the key holds nothing and can be forgotten.
func (ks *keyState) idle() bool {
	return ks.open == nil && !ks.busy && len(ks.queue) == 0 && ks.paused == nil
}
