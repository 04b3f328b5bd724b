package publisher

import (
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
	ks        *keyState
	msgs      []*pubsubpb.PubsubMessage
	n         int // messages added (msgs is dropped once done)
	bytes     int // encoded size of the messages in a request
	flowBytes int // sum of message sizes, as flow control counted them
	open      bool
	deadline  time.Time // when Delay closes it
	done      chan struct{}
	ids       []string
	err       error
	msgErrs   []error      // per message, when single messages failed (then err is nil)
	spans     []*tracedMsg // the messages' spans, when tracing

	// The messages' wire messages and Results are taken from slabs, a
	// chunk at a time, not allocated one by one: msgs points into pms
	// (dropped with msgs once done), Results into rs (kept alive by the
	// Results the caller holds, and holding only b).
	pms []pubsubpb.PubsubMessage
	rs  []Result
	// wire holds the trace contexts the messages carry, as attribute
	// entries in wire format (their unknown fields), a chunk at a time.
	wire []byte
}

// minChunk is the smallest slab chunk a batch takes.
const minChunk = 4

// slot returns the next free wire message and Result of b, taking a new
// chunk when the last one is full: as many as the key's previous batch
// held (so a steady load takes one chunk per batch), at least minChunk and
// at least what b already holds (so a growing one takes a few), and never
// more than the batch may still take.
func (b *batch) slot(maxMessages int) (*pubsubpb.PubsubMessage, *Result) {
	if len(b.pms) == cap(b.pms) {
		c := min(max(b.ks.lastN, minChunk, b.n), maxMessages-b.n)
		b.pms = make([]pubsubpb.PubsubMessage, 0, c)
		b.rs = make([]Result, 0, c)
		if b.msgs == nil {
			b.msgs = make([]*pubsubpb.PubsubMessage, 0, c)
		}
	}
	i := len(b.pms)
	b.pms = b.pms[:i+1] // extended in place: a proto message is not copied
	b.rs = b.rs[:i+1]
	return &b.pms[i], &b.rs[i]
}

// carry makes pm carry the trace context sc (valid) on the wire: encoded
// attribute entries (n bytes: carrier.WireSize) set as its unknown fields,
// so no map of attributes is copied or built for it. The bytes come from
// b.wire, which takes a new chunk, for as many messages as the key's last
// batch held, when the last one is full.
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
