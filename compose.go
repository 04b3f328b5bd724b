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

// Source returns the subscriber's source, with EagerTrack and FlowGate
// fused in so every message is leased and counted where it is decoded;
// pair it with Acknowledge. Every pipeline from Source, and every Run,
// shares the subscriber's one budget. A pipeline started after Close
// began fails with ErrClosed; one stopped by its own context or a failing
// stage nacks what it was handed but did not settle.
func (s *Subscriber) Source() stage.Source[*Message] { return &subSource{s: s, src: s.src} }

// subSource is one run of src: Source's, or Run's (which counts
// processing only once a handler starts).
type subSource struct {
	s   *Subscriber
	src *source.Source
}

var _ stage.BatchSource[*Message] = (*subSource)(nil)

func (ss *subSource) Run(g *stage.Group) <-chan *Message {
	if !ss.join(g) {
		return closedChan[*Message]()
	}
	return ss.src.Run(g)
}

func (ss *subSource) RunBatches(g *stage.Group) <-chan []*Message {
	if !ss.join(g) {
		return closedChan[[]*Message]()
	}
	return ss.src.RunBatches(g)
}

// join counts the run until g is done (shutdown drains by waiting for the
// runs), or fails g with ErrClosed once Close has begun.
func (ss *subSource) join(g *stage.Group) bool {
	if !ss.s.life.join() {
		g.Fail(ErrClosed)
		return false
	}
	g.OnDone(ss.s.life.leave)
	return true
}

func closedChan[T any]() <-chan T {
	c := make(chan T)
	close(c)
	return c
}

// Acknowledge returns the sink paired with Source: each message that
// reaches it without an outcome gets the OnSuccess outcome (default ack).
func (s *Subscriber) Acknowledge() stage.Sink[*Message] { return sink.Acknowledge(s.policy) }

// Handler processes one message. Returning nil applies OnSuccess (default
// ack), an error OnFailure (default nack), unless the handler settled the
// message itself. It must return when ctx is done.
type Handler func(ctx context.Context, m *Message) error

// Process returns the processing stage Run uses: parallelism workers
// calling handler, one message per ordering key at a time once the
// subscription or a message says it orders by key (or Ordering is set).
// A panicking handler nacks its message and is logged. It does not
// outlive Close's drain timeout in a pipeline of your own.
func (s *Subscriber) Process(parallelism int, handler Handler) stage.Flow[*Message, *Message] {
	return s.process(parallelism, handler, nil)
}

// process is Process; emit, if set, filters what the workers pass on.
// While draining, a worker settles what it takes with OnShutdown.
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
		ctx = hc.of(ctx, s)
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
			err = s.recovered(p, m)
		}
	}()
	return h(ctx, m)
}

// recovered turns a handler's panic into a *stage.PanicError, logged and
// kept for Stats, after nacking the messages the handler was given.
func (s *Subscriber) recovered(p any, ms ...*Message) error {
	pe := &stage.PanicError{Value: p, Stack: debug.Stack()}
	s.c.panicked.Store(pe)
	s.cfg.Logger.Error("pubsubflow: handler panicked; its unsettled messages nacked",
		"subscription", s.sub, "messages", len(ms), "message_id", ms[0].ID, "panic", p)
	for _, m := range ms {
		m.Nack()
	}
	return pe
}

// handlerKey marks a handler's ctx with its subscriber, so Shutdown
// called with it knows not to wait for the handler that called it.
type handlerKey struct{}

// handlerCtx keeps the last handler ctx made: the workers pass the same
// ctx for every message, and one allocation per message would show.
type handlerCtx struct{ last atomic.Pointer[madeCtx] }

type madeCtx struct{ parent, ctx context.Context }

func (h *handlerCtx) of(parent context.Context, s *Subscriber) context.Context {
	if c := h.last.Load(); c != nil && c.parent == parent {
		return c.ctx
	}
	c := &madeCtx{parent: parent, ctx: context.WithValue(parent, handlerKey{}, s)}
	h.last.Store(c)
	return c.ctx
}

// Run processes messages with parallelism workers calling handler until
// ctx is done or the subscriber is closed (both: drain, then return nil),
// or a terminal error, which it returns. It returns once every goroutine
// it started has exited; handlers that ignore their ctx are reported a
// second past the drain timeout as a *StuckHandlersError. Several Runs
// and Source pipelines may share one subscriber and its budget.
func (s *Subscriber) Run(ctx context.Context, parallelism int, handler Handler) error {
	if err := checkRun("Run", parallelism, handler == nil); err != nil {
		return err
	}
	return s.runPipeline(ctx, func(pctx context.Context) error {
		src := stage.Source[*Message](&subSource{s: s, src: s.runSrc})
		return pipeline.FromContext(pctx, src).Via(s.process(parallelism, handler, unsettled)).To(s.Acknowledge())
	})
}

func unsettled(m *Message) bool { return !m.Settled() }

func checkRun(name string, parallelism int, nilHandler bool) error {
	if parallelism < 1 {
		return fmt.Errorf("pubsubflow: %s: parallelism %d, want ≥ 1", name, parallelism)
	}
	if nilHandler {
		return fmt.Errorf("pubsubflow: %s: nil handler", name)
	}
	return nil
}

// runPipeline runs pipe as Run says. pipe's context is cancelled only
// past the drain timeout: cancelling ctx means drain, not abandon.
func (s *Subscriber) runPipeline(ctx context.Context, pipe func(pctx context.Context) error) error {
	if s.life.draining() {
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
		// Nothing is processing once the pipeline has ended: no drain.
		return runResult(err, s.shutdown(context.Background(), false))
	case <-ctx.Done():
	case <-s.life.closingCh:
	}
	closeErr := s.Close()
	// Close has drained, nacked what is left and cancelled the pipeline;
	// a handler that ignores its ctx gets a short grace, then is reported.
	grace := time.NewTimer(stuckGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return runResult(err, closeErr)
	case <-grace.C:
		return errors.Join(closeErr, &StuckHandlersError{Running: int(s.c.inHandler.Load())})
	}
}

// runResult is the pipeline's error unless it only reports the shutdown.
func runResult(err, closeErr error) error {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
		return err
	}
	return closeErr
}

// stuckGrace is how long Run waits for handlers past their ctx's end.
const stuckGrace = time.Second

// StuckHandlersError is what Run returns when handlers ignore their ctx
// past the drain timeout; their messages were nacked.
type StuckHandlersError struct {
	Running int // handlers still running when Run returned
}

// Error says how many handlers were left running.
func (e *StuckHandlersError) Error() string {
	return fmt.Sprintf("pubsubflow: Run: %d handler(s) still running after the drain timeout and cancellation; their messages were nacked", e.Running)
}
