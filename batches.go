package pubsubflow

import (
	"context"
	"fmt"
	"hash/maphash"
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
// to 100 messages, none waiting more than a second. A Size above the flow
// budget is allowed: a batch also goes once the budget is spent.
type BatchOptions struct {
	// Size is the most messages in a batch (default 100).
	Size int
	// Bytes, if set, is the most bytes (Message.Size) in a batch; a larger
	// message goes alone.
	Bytes int
	// Wait is the longest a message waits for its batch to fill (default
	// 1 s), leased meanwhile.
	Wait time.Duration
}

// Validate reports a bad option, naming it.
func (o BatchOptions) Validate() error {
	if err := o.operators().Validate(); err != nil {
		return fmt.Errorf("pubsubflow: %w", err)
	}
	return nil
}

func (o BatchOptions) operators() operators.BatchOptions[*Message] {
	return operators.BatchOptions[*Message]{Size: o.Size, Bytes: o.Bytes, SizeOf: (*Message).Size, Wait: o.Wait, Ordered: true}
}

// BatchHandler processes a batch of messages. It may settle some itself;
// returning nil applies OnSuccess (default ack) to the rest, an error
// OnFailure (default nack), a panic nacks them. It must return when ctx
// is done. The slice is the handler's to change.
type BatchHandler func(ctx context.Context, ms []*Message) error

// RunBatches is Run for a handler that takes batches: parallelism workers
// each call handler with a batch, handed on at Size messages or Bytes
// bytes, after Wait, or when the flow budget is spent and every message
// received has reached the batcher (assuming RunBatches is the only
// consumer). A message whose lease ended while it waited is left out.
// When the subscription orders by key (or a message says so), a batch
// holds one key's messages in order, and a key's next batch goes only
// once the previous one is settled. Stopping is Run's.
func (s *Subscriber) RunBatches(ctx context.Context, parallelism int, opt BatchOptions, handler BatchHandler) error {
	if err := checkRun("RunBatches", parallelism, handler == nil); err != nil {
		return err
	}
	if err := opt.Validate(); err != nil {
		return err
	}
	return s.runPipeline(ctx, func(pctx context.Context) error {
		w := &batchWorkers{s: s, n: parallelism, h: handler, handedBase: uint64(s.c.handed.Load())}
		bopt := opt.operators()
		bopt.Idle = w.noMoreForNow
		bopt.Key, bopt.OrderedKey = orderedKeyOf, isOrderingKey // only what needsOrder keeps order
		if s.ordered {
			bopt.Key, bopt.OrderedKey = batchKey(parallelism), nil
		}
		b := operators.Batch(bopt)
		w.release = b.Release
		return pipeline.Map(pipeline.FromContext(pctx, s.Source()), stage.Flow[*Message, []*Message](b)).To(w)
	})
}

// noMoreForNow is the batcher's Idle: all the source handed on reached the
// batcher, the source holds nothing, and the unsettled messages (less
// those about to make room) fill the budget, so nothing more comes until
// one is settled. A racing settle may make one batch go early or late.
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
	if m := s.fc.MaxMessages(); m > 0 && unsettled-settling >= m {
		return true
	}
	b := s.fc.MaxBytes()
	return b > 0 && s.fc.OutstandingBytes() >= b
}

// batchKey keys a message by its ordering key, spreading the messages
// without one over lanes keys of their own.
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
// others by "", the key without order.
func orderedKeyOf(m *Message) string {
	if needsOrder(m) {
		return m.OrderingKey
	}
	return ""
}

func isOrderingKey(k string) bool { return k != "" }

// batchWorkers is the sink of RunBatches: n workers calling the handler.
type batchWorkers struct {
	s          *Subscriber
	n          int
	h          BatchHandler
	release    func([]*Message)
	handedBase uint64       // the subscriber's hand-off count when the run began
	settling   atomic.Int64 // messages whose handler returned, being settled
}

func (w *batchWorkers) Run(g *stage.Group, in <-chan []*Message) error {
	workers := stage.NewGroup(g.Context())
	for range w.n {
		workers.Go(func(ctx context.Context) error {
			for b, ok := stage.Recv(ctx, in); ok; b, ok = stage.Recv(ctx, in) {
				w.handle(ctx, b)
			}
			return nil
		})
	}
	return workers.Wait()
}

// handle runs the handler on b's live messages, settles what it left, and
// releases b so its key's next batch may go.
func (w *batchWorkers) handle(ctx context.Context, b []*Message) {
	defer w.release(b)
	s := w.s
	live := make([]*Message, 0, len(b))
	now := time.Now()
	for _, m := range b {
		if !message.Of(m).ExpireIfLate(m, now) {
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
	err := w.safeHandleBatch(ctx, live)
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

func (w *batchWorkers) safeHandleBatch(ctx context.Context, ms []*Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = w.s.recovered(p, ms...)
		}
	}()
	return w.h(ctx, slices.Clone(ms))
}
