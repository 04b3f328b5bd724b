package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Source returns the subscriber's source: its source.Source with the
// receipt steps fused in — EagerTrack on the subscriber's extender and
// FlowGate on its budget — so every message is leased and counted where
// its response is decoded, wherever it waits afterwards. The streams read
// only while the budget has room; restart wraps only the streams, and the
// leases, the budget and the held messages outlive it. Pair it with
// Acknowledge (or settle each message yourself).
//
// The source hands on batches (a response's worth, or all that arrived
// since the last hand-off) to stages that take them (ParallelMap,
// Acknowledge), one message at a time to the others. A message counts as
// processing (Stats) from the moment it leaves the source.
//
// Every pipeline from Source, and every Run, shares the subscriber's one
// budget: however many run at once, the server is never asked for more
// than MaxOutstandingMessages. A pipeline started after Close began fails
// with ErrClosed. The source ends when the subscriber shuts down (after
// settling its queued messages with the OnShutdown outcome) or on a
// terminal stream error, which the pipeline returns. A pipeline stopped by
// its own context or a failing stage nacks what it was handed but did not
// settle, so a later pipeline gets it again.
func (s *Subscriber) Source() stage.Source[*Message] { return &subSource{s: s, kind: runCustom} }

// runKind says how a run counts a message as processing: from the moment
// it leaves the source (a custom pipeline), or only once a handler starts
// on it (Run).
type runKind int

const (
	runCustom runKind = iota
	runHandlers
)

// subSource is one run of the subscriber's source.
type subSource struct {
	s    *Subscriber
	kind runKind
}

var _ stage.BatchSource[*Message] = (*subSource)(nil)

func (ss *subSource) Run(g *stage.Group) <-chan *Message {
	src, ok := ss.join(g)
	if !ok {
		out := make(chan *Message)
		close(out)
		return out
	}
	return src.Run(g)
}

// RunBatches joins the run to the subscriber's lifecycle (a run started
// after Close began fails with ErrClosed) and starts the source under g.
// The run counts until its pipeline is over: shutdown drains by waiting
// for the runs, up to the drain timeout.
func (ss *subSource) RunBatches(g *stage.Group) <-chan []*Message {
	src, ok := ss.join(g)
	if !ok {
		out := make(chan []*Message)
		close(out)
		return out
	}
	return src.RunBatches(g)
}

// join adds the run to the lifecycle until g is done, and returns the
// source it runs; false (g failed with ErrClosed) once Close has begun.
func (ss *subSource) join(g *stage.Group) (*source.Source, bool) {
	s := ss.s
	if !s.life.join() {
		g.Fail(ErrClosed)
		return nil, false
	}
	g.OnDone(s.life.leave)
	if ss.kind == runHandlers {
		return s.runSrc, true
	}
	return s.src, true
}

// Acknowledge returns the sink paired with Source: each message that
// reaches it without an outcome gets the OnSuccess outcome (default ack).
// Its settle path gives back its permit and lease and queues the RPC.
func (s *Subscriber) Acknowledge() stage.Sink[*Message] { return sink.Acknowledge(s.policy) }

// Handler processes one message. Returning nil applies OnSuccess (default
// ack), an error OnFailure (default nack), unless the handler settled the
// message itself. It must return when ctx is done.
type Handler func(ctx context.Context, m *Message) error

// Process returns the processing stage Run uses: parallelism fixed
// workers calling handler; when the subscription orders by key (or
// Ordering is set), one message per ordering key at a time, in order. What
// StreamingPull's responses say decides over GetSubscription: once a
// message arrives marked Ordered (with an ordering key), the stage lets
// the handlers it started finish and runs the messages of each key one at
// a time from then on. A panicking handler nacks its message and is
// logged; the subscriber goes on.
//
// On a subscription not known to order by key, the stage does not
// outlive Close in a pipeline of your own: once Close has given up on the
// runs (past the drain timeout, when it cancels Run's pipelines), it stops
// taking input and closes its output. Close nacks what it held; handlers
// still running end with the pipeline's context.
func (s *Subscriber) Process(parallelism int, handler Handler) stage.Flow[*Message, *Message] {
	return s.process(parallelism, handler, nil)
}

// unsettled keeps the messages a handler left without an outcome.
func unsettled(m *Message) bool { return !m.Settled() }

// process is Process; emit, if set, filters what the workers pass on. Run
// passes on only unsettled messages: the Acknowledge sink has nothing to do
// for the others. A message counts as processing from the moment a worker
// takes it (if it did not already, leaving a custom pipeline's source);
// while the subscriber drains, a worker gives the messages it takes the
// OnShutdown outcome instead of handling them.
func (s *Subscriber) process(parallelism int, handler Handler, emit func(*Message) bool) stage.Flow[*Message, *Message] {
	var hc handlerCtx
	call := func(ctx context.Context, m *Message) (*Message, error) {
		if message.Of(m).ExpireIfLateNow(m) {
			return m, nil // settled, or its lease lapsed while it waited
		}
		if message.Of(m).HandedOffBy() == 0 {
			if s.life.draining() {
				sink.Settle(m, s.cfg.OnShutdown, s.cfg.ShutdownNackDelay)
				return m, nil
			}
			s.runBook.markHanded(m)
		}
		ctx = hc.of(ctx, s) // the worker's ctx: the same for every message
		var span trace.Span
		if s.tracing != nil {
			ctx, span = s.tracing.startProcess(ctx, m)
		}
		s.c.inHandler.Add(1)
		err := s.safeHandle(ctx, handler, m)
		s.c.inHandler.Add(-1)
		sink.Apply(m, err, s.policy)
		if span != nil {
			s.tracing.endProcess(m, span, err)
		}
		return m, nil
	}
	keyed := operators.ParallelMap(parallelism, call, operators.Options[*Message, *Message]{
		Emit: emit, Mode: operators.Keyed, Key: orderingKey})
	if s.ordered {
		return keyed
	}
	// Not told it orders by key: free until a response says it does.
	free := operators.ParallelMap(parallelism, call, operators.Options[*Message, *Message]{Emit: emit})
	return &switchFlow{free: free.(stage.BatchFlow[*Message, *Message]), keyed: keyed, abandoned: s.life.abandoned}
}

// orderingKey keys a message by its ordering key; messages without one
// get a key of their own, so they never wait for each other.
func orderingKey(m *Message) string {
	if m.OrderingKey == "" {
		return "\x00" + m.AckID
	}
	return m.OrderingKey
}

func (s *Subscriber) safeHandle(ctx context.Context, h Handler, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &stage.PanicError{Value: p, Stack: debug.Stack()}
			s.c.setErr(err)
			s.cfg.Logger.Error("pubsubflow: handler panicked; message nacked",
				"subscription", s.sub, "message_id", m.ID, "panic", p)
			m.Nack()
		}
	}()
	return h(ctx, m)
}

// handlerKey marks a handler's ctx with its subscriber, so Shutdown
// called with it knows not to wait for the handler that called it.
type handlerKey struct{}

func withHandler(ctx context.Context, s *Subscriber) context.Context {
	return context.WithValue(ctx, handlerKey{}, s)
}

// handlerCtx keeps the last handler ctx made, so that the workers, which
// pass the same ctx for every message, do not allocate one per message.
type handlerCtx struct{ last atomic.Pointer[madeCtx] }

type madeCtx struct{ parent, ctx context.Context }

// of returns withHandler(parent, s), made once per parent. parent is a
// worker's ctx (a pointer type, so comparable).
func (h *handlerCtx) of(parent context.Context, s *Subscriber) context.Context {
	if c := h.last.Load(); c != nil && c.parent == parent {
		return c.ctx
	}
	c := &madeCtx{parent: parent, ctx: withHandler(parent, s)}
	h.last.Store(c)
	return c.ctx
}

// Run receives and processes messages with parallelism workers calling
// handler until ctx is done or the subscriber is closed (both mean: stop
// and drain, then return nil), or a terminal error (subscription deleted,
// permission denied), which it returns. It returns only after every
// goroutine it started has exited — except a handler that ignores its ctx:
// once the drain timeout has passed and handlers' ctx was cancelled, Run
// waits one more second, then returns a *StuckHandlersError counting the
// handlers still running (their messages already nacked).
//
// Several Runs (and Source pipelines) may run at once on one subscriber;
// they share its one budget.
func (s *Subscriber) Run(ctx context.Context, parallelism int, handler Handler) error {
	if parallelism < 1 {
		return fmt.Errorf("pubsubflow: Run: parallelism %d, want ≥ 1", parallelism)
	}
	if handler == nil {
		return errors.New("pubsubflow: Run: nil handler")
	}
	return s.runPipeline(ctx, func(pctx context.Context) error {
		src := &subSource{s: s, kind: runHandlers}
		return pipeline.FromContext(pctx, stage.Source[*Message](src)).Via(s.process(parallelism, handler, unsettled)).To(s.Acknowledge())
	})
}

// runPipeline runs pipe (Run's pipeline, or RunBatches') until ctx is done
// or the subscriber is closed (both mean: stop and drain, then return
// nil), or until the pipeline ends with a terminal error, which it
// returns. pipe's context is cancelled only once the drain timeout has
// passed: cancelling ctx means stop-and-drain, not abandon.
func (s *Subscriber) runPipeline(ctx context.Context, pipe func(pctx context.Context) error) error {
	if s.life.closing() {
		return ErrClosed
	}
	pctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(s.life.abandoned, cancel)
	defer stop()
	defer cancel()

	done := make(chan error, 1)
	go func() { done <- pipe(pctx) }()
	select {
	case err := <-done:
		// A terminal error: the pipeline has ended, so nothing is in
		// processing; nack what is still held without waiting.
		closeErr := s.shutdown(context.Background(), false)
		return runResult(err, closeErr)
	case <-ctx.Done():
	case <-s.life.closingCh:
	}
	closeErr := s.Close()
	// Close has drained (up to the drain timeout), nacked what is left and
	// cancelled the pipeline. A handler that ignores its ctx would keep
	// the caller waiting for ever: after a short grace it returns and
	// says so.
	grace := time.NewTimer(stuckGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return runResult(err, closeErr)
	case <-grace.C:
		return errors.Join(closeErr, &StuckHandlersError{Running: int(s.c.inHandler.Load())})
	}
}

// runResult is what Run returns once its pipeline has ended with err:
// the pipeline's error unless it only reports the shutdown.
func runResult(err, closeErr error) error {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
		return err
	}
	return closeErr
}

// stuckGrace is how long Run waits, after the drain timeout and the
// cancellation of its handlers' ctx, for handlers to return.
const stuckGrace = time.Second

// StuckHandlersError is what Run returns when handlers are still running
// after the drain timeout and their ctx was cancelled (they ignore their
// ctx). Their messages were already nacked; the handlers' goroutines are
// left running, as Go cannot stop them.
type StuckHandlersError struct {
	Running int // handlers still running when Run returned
}

// Error says how many handlers were left running.
func (e *StuckHandlersError) Error() string {
	return fmt.Sprintf("pubsubflow: Run: %d handler(s) still running after the drain timeout and cancellation; their messages were nacked", e.Running)
}
