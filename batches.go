package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/stage"
)

// BatchOptions configure RunBatches. The zero value means batches of up
// to 100 messages, none waiting more than a second.
//
// A Size (or Bytes) larger than the flow budget (MaxOutstandingMessages,
// MaxOutstandingBytes) is allowed: a batch is also handed to a handler as
// soon as the budget is spent — the messages held unsettled, in handlers
// and in batches, fill it — and every message received has reached the
// batcher, because then nothing more can arrive until something is
// settled — so a batch of 500 under a budget of 100 goes at 100 at once,
// instead of waiting out Wait every time. Refusing such a Size would not
// be enough: the byte budget can be spent by a few large messages at any
// Size, and the room left changes with what the handlers hold.
type BatchOptions struct {
	// Size is the most messages in a batch (default 100).
	Size int
	// Bytes, if set, is the most bytes in a batch, counted as flow control
	// counts them (Message.Size); a message larger than Bytes goes alone.
	// Default: no byte limit.
	Bytes int
	// Wait is the longest a message waits for its batch to fill (default
	// 1 s). Messages stay leased while they wait, so Wait may exceed the
	// stream ack deadline.
	Wait time.Duration
}

// Validate reports a bad option, naming it.
func (o BatchOptions) Validate() error {
	var errs []error
	if o.Size < 0 {
		errs = append(errs, fmt.Errorf("pubsubflow: BatchOptions.Size %d: want ≥ 1 (0 = default %d)", o.Size, operators.DefaultBatchSize))
	}
	if o.Bytes < 0 {
		errs = append(errs, fmt.Errorf("pubsubflow: BatchOptions.Bytes %d: want ≥ 1 (0 = no byte limit)", o.Bytes))
	}
	if o.Wait < 0 {
		errs = append(errs, fmt.Errorf("pubsubflow: BatchOptions.Wait %v: want > 0 (0 = default %v)", o.Wait, operators.DefaultBatchWait))
	}
	return errors.Join(errs...)
}

// BatchHandler processes a batch of messages. It may settle messages one
// by one (m.Nack() for a bad row, m.Ack()); returning nil then applies
// OnSuccess (default ack) to the messages it left unsettled, an error
// OnFailure (default nack). A panic nacks the unsettled messages. It must
// return when ctx is done.
//
// The slice is the handler's to change: the library settles from its own
// record of the batch, so a handler that filters ms in place, sets an
// element to nil or reslices it still has every message it was handed,
// and left unsettled, acked on nil (nacked on an error). To keep a message
// out of that, settle it (m.Nack()).
type BatchHandler func(ctx context.Context, ms []*Message) error

// RunBatches is Run for a handler that takes batches: parallelism workers
// each call handler with a batch of messages, made as BatchOptions says.
// A batch is handed on when it has Size messages or Bytes bytes, when its
// oldest message has waited Wait, or when the flow budget is spent by
// unsettled messages and every message received has reached the batcher
// (see BatchOptions). A backlog that runs dry leaves the last batch to
// wait out Wait: no client can tell "nothing more for now" from "the
// next response is on its way" then.
//
// Messages stay leased and counted by flow control while they wait in a
// batch; in Stats they count as Processing from the moment they leave
// the source for the batcher. A message whose lease ended while it waited
// (past MaxExtension) is left out of its batch.
//
// When the subscription orders by key (or Ordering is set), a batch holds
// messages of one ordering key, in order, and a key's next batch is handed
// to a handler only after the previous one returned and its messages were
// settled: batches of one key never overlap. Messages without an ordering
// key are batched over parallelism lanes of their own. A server that hands
// out a key's next message only once the previous one is acked
// (pubsubtest does; Pub/Sub delivers several of a key at a time) makes
// batches of one message per key, each waiting out Wait unless the budget
// is spent: keep Wait short there. What StreamingPull's responses say
// decides over GetSubscription: a message marked Ordered (with an ordering
// key) is batched and handed on this way even on a subscription
// GetSubscription called unordered.
//
// Stopping is Run's: cancelling ctx, or closing the subscriber, stops the
// streams; the messages already received are batched and handled (within
// DrainTimeout), and then RunBatches returns nil; a terminal stream error
// is returned. The budget-spent flush assumes RunBatches is the
// subscriber's only consumer: with another pipeline on the same
// subscriber, batches are handed on by Size, Bytes and Wait only.
//
// With a TracerProvider each message gets its process span, which ends
// when the handler returns; the handler's ctx carries none of them (a
// batch has many parents).
func (s *Subscriber) RunBatches(ctx context.Context, parallelism int, opt BatchOptions, handler BatchHandler) error {
	if parallelism < 1 {
		return fmt.Errorf("pubsubflow: RunBatches: parallelism %d, want ≥ 1", parallelism)
	}
	if handler == nil {
		return errors.New("pubsubflow: RunBatches: nil handler")
	}
	if err := opt.Validate(); err != nil {
		return err
	}
	return s.runPipeline(ctx, func(pctx context.Context) error {
		return s.batchPipeline(pctx, parallelism, opt, handler)
	})
}

// batchPipeline is source → Batch → batch handlers, the source handing
// its messages on in chunks and marking them as processing as they leave.
func (s *Subscriber) batchPipeline(ctx context.Context, parallelism int, opt BatchOptions, h BatchHandler) error {
	w := &batchWorkers{s: s, n: parallelism, h: h, handedBase: uint64(s.c.handed.Load())}
	bopt := operators.BatchOptions[*Message]{
		Size:   opt.Size,
		Bytes:  opt.Bytes,
		SizeOf: (*Message).Size,
		Wait:   opt.Wait,
		Idle:   w.noMoreForNow,
	}
	bopt.Ordered = true
	if s.ordered {
		bopt.Key = batchKey(parallelism)
	} else {
		// Not told it orders by key: only the messages whose response
		// says so are kept in order; the others share one free key.
		bopt.Key, bopt.OrderedKey = orderedKeyOf, isOrderingKey
	}
	b := operators.Batch(bopt)
	w.release = b.Release
	return pipeline.Map(pipeline.FromContext(ctx, s.Source()), stage.Flow[*Message, []*Message](b)).To(w)
}

// noMoreForNow is the batcher's Idle: all the source handed on reached the
// batcher (received: what the batcher has seen), the source holds
// nothing, and the messages received and not settled fill the budget — in
// handlers, or waiting in batches. Then the server sends nothing until one
// of them is settled, and waiting for a fuller batch would only wait out
// BatchOptions.Wait.
//
// Left out of the message count: settled messages whose acks are still on
// their way (flow control counts them until their acks are final, but the
// server may have taken the acks and be sending more already), and the
// messages of a batch whose handler has returned and that are being
// settled (they are about to make room, and their first acks may already
// have brought new messages). The byte budget is read as flow control
// counts it, acks on their way included, so under a spent byte budget a
// batch may go a little early.
//
// The counters are read apart, so a settle racing the read may give a
// wrong answer once: early, a smaller batch; late, the batch goes at the
// next event (a batch taken, a message, a release) or at Wait.
func (w *batchWorkers) noMoreForNow(received uint64) bool {
	s := w.s
	handed := s.c.handed.Load()
	if uint64(handed) != w.handedBase+received {
		return false
	}
	settling := w.settling.Load()
	unsettled := s.src.Stats().Unsettled
	if unsettled-(handed-s.c.settledHanded.Load()) > 0 {
		return false // the source still holds some
	}
	fc := s.fc
	if m := fc.MaxMessages(); m > 0 && unsettled-settling >= m {
		return true
	}
	b := fc.MaxBytes()
	return b > 0 && fc.OutstandingBytes() >= b
}

// batchKey keys a message by its ordering key; messages without one are
// spread over lanes lanes of their own, so they are batched together
// without waiting for each other more than lanes allow.
func batchKey(lanes int) func(*Message) string {
	seed := maphash.MakeSeed()
	return func(m *Message) string {
		if m.OrderingKey != "" {
			return m.OrderingKey
		}
		return "\x00" + strconv.FormatUint(maphash.String(seed, m.ID)%uint64(lanes), 10)
	}
}

// orderedKeyOf keys a message that needsOrder by its ordering key, the
// others by "", the key without order (isOrderingKey).
func orderedKeyOf(m *Message) string {
	if needsOrder(m) {
		return m.OrderingKey
	}
	return ""
}

func isOrderingKey(k string) bool { return k != "" }

// batchWorkers is the sink of RunBatches: n workers calling the batch
// handler. It takes the batcher's output in chunks (stage.BatchSink).
type batchWorkers struct {
	s          *Subscriber
	n          int
	h          BatchHandler
	release    func([]*Message)
	handedBase uint64       // the subscriber's hand-off count when the run began
	settling   atomic.Int64 // messages whose handler returned, being settled
}

var _ stage.BatchSink[[]*Message] = (*batchWorkers)(nil)

func (w *batchWorkers) Run(g *stage.Group, in <-chan []*Message) error {
	return w.run(g, func(ctx context.Context) bool {
		b, ok := stage.Recv(ctx, in)
		if ok {
			w.handle(ctx, b)
		}
		return ok
	})
}

func (w *batchWorkers) RunBatches(g *stage.Group, in <-chan [][]*Message) error {
	return w.run(g, func(ctx context.Context) bool {
		bs, ok := stage.Recv(ctx, in)
		for _, b := range bs {
			w.handle(ctx, b)
		}
		return ok
	})
}

func (w *batchWorkers) run(g *stage.Group, next func(ctx context.Context) bool) error {
	workers := stage.NewGroup(g.Context())
	for range w.n {
		workers.Go(func(ctx context.Context) error {
			for next(ctx) {
			}
			return nil
		})
	}
	return workers.Wait()
}

// handle runs the handler on the unsettled messages of b, settles what
// it left by its result, and then releases b (its key's next batch may
// go). The handler gets a copy of the batch's record: whatever it does to
// its slice (filters it in place, sets elements to nil, reslices), what
// is settled is what it was handed.
func (w *batchWorkers) handle(ctx context.Context, b []*Message) {
	defer w.release(b)
	s := w.s
	live := make([]*Message, 0, len(b))
	now := time.Now()
	for _, m := range b {
		if !message.Of(m).ExpireIfLate(m, now) { // else its lease ended while it waited
			live = append(live, m)
		}
	}
	if len(live) == 0 {
		return
	}
	var spans []trace.Span
	if s.tracing != nil {
		spans = make([]trace.Span, len(live))
		for i, m := range live {
			_, spans[i] = s.tracing.startProcess(ctx, m)
		}
	}
	s.c.inHandler.Add(1)
	err := s.safeHandleBatch(ctx, w.h, live, slices.Clone(live))
	s.c.inHandler.Add(-1)
	var n int64
	for _, m := range live {
		if !m.Settled() {
			n++
		}
	}
	w.settling.Add(n)
	for i, m := range live {
		sink.Apply(m, err, s.policy)
		if spans != nil {
			s.tracing.endProcess(m, spans[i], err)
		}
	}
	w.settling.Add(-n)
}

// safeHandleBatch calls h with handed (a copy of ms, h's to change),
// turning a panic into a *stage.PanicError after nacking the messages of
// ms that h left unsettled.
func (s *Subscriber) safeHandleBatch(ctx context.Context, h BatchHandler, ms, handed []*Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &stage.PanicError{Value: p, Stack: debug.Stack()}
			s.c.setErr(err)
			s.cfg.Logger.Error("pubsubflow: batch handler panicked; its unsettled messages nacked",
				"subscription", s.sub, "messages", len(ms), "panic", p)
			for _, m := range ms {
				m.Nack()
			}
		}
	}()
	return h(ctx, handed)
}
