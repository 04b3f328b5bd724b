package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/batch"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Source returns the subscriber's source: the StreamingPull streams, whose
// receive loop runs the receipt steps on every response the moment it is
// decoded — bind the settle path, lease (EagerTrack's step), count
// (FlowGate's step) — so every message is leased and counted from the
// moment it is received, wherever it waits afterwards. The streams read
// only while the flow budget has room. Restart wraps only the streams: the
// lease table, the flow budget and the buffered messages survive
// reconnects. Pair it with Acknowledge (or settle each message yourself).
//
// The source hands on batches (a response's worth, or all that arrived
// since the last hand-off) to stages that take them (ParallelMap,
// Acknowledge), one message at a time to the others. A message counts as
// processing (Stats) from the moment it leaves the source.
//
// The source ends when the subscriber shuts down (after handing its
// buffered messages to the OnShutdown outcome) or on a terminal stream
// error, which the pipeline returns. A pipeline stopped by its own context
// or a failing stage nacks what it held and what it was handed but did not
// settle, so a later pipeline on the same subscriber gets them again.
func (s *Subscriber) Source() stage.Source[*Message] { return &subSource{s: s, mark: true} }

// subSource is a run of the subscriber's source. mark says whether a
// message counts as processing when it leaves the source (a custom
// pipeline) or only when a handler starts on it (Run).
type subSource struct {
	s    *Subscriber
	mark bool
}

// Run hands on one message at a time. The unbatching goroutine is the
// run's own, so Close waits for it; what it holds when the run stops is
// settled like what the source itself still holds (unsent).
func (ss *subSource) Run(g *stage.Group) <-chan *Message {
	out, rg := ss.start(g)
	if rg == nil {
		rg = g
	}
	return batch.Unbatch(rg, out, ss.s.unsentOne)
}

func (ss *subSource) RunBatches(g *stage.Group) <-chan []*Message {
	out, _ := ss.start(g)
	return out
}

// start starts a run under g and returns its output and its own group
// (nil when the subscriber is closed).
func (ss *subSource) start(g *stage.Group) (<-chan []*Message, *stage.Group) {
	s := ss.s
	if s.closing.Load() {
		g.Fail(ErrClosed)
		out := make(chan []*Message)
		close(out)
		return out, nil
	}
	s.active.Add(1)
	s.runs.Add(1)
	r := &run{id: s.nextRun.Add(1), mark: ss.mark}
	// This run's own goroutines (streams and hand-off) live in a group of
	// their own: its exit is the end of the run, Close waits for it, and
	// shutdown can stop it once the drain timeout has passed even if the
	// pipeline downstream no longer reads. The streams also stop when the
	// subscriber drains; their terminal error fails the pipeline.
	rg := stage.NewGroup(context.WithValue(g.Context(), runKey{}, r))
	stopRun := context.AfterFunc(s.abandon, rg.Cancel)
	unhook := context.AfterFunc(s.life, rg.Cancel)
	out := s.src.RunBatches(rg)
	handedOff := make(chan struct{})
	g.Go(func(context.Context) error {
		err := rg.Wait()
		unhook()
		stopRun()
		close(handedOff)
		s.active.Add(-1)
		ping(s.runsDone)
		s.runs.Done()
		return ignoreCanceled(err)
	})
	g.Go(func(ctx context.Context) error {
		<-ctx.Done()
		<-handedOff
		s.nackStranded(r.id)
		return nil
	})
	return out, rg
}

// run is one run of the source, carried in its group's context so the
// source's hand-off hook knows whose hand-off it is.
type run struct {
	id   uint64
	mark bool
}

type runKey struct{}

// ignoreCanceled drops the error of a group stopped by cancellation.
func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// nackStranded nacks what a stopped pipeline was handed and left
// unsettled (dropped by one of its stages, or in flight when it was
// cancelled), so it is neither held until max extension nor counted as
// processing forever. A handler still running on such a message finds its
// outcome already taken: cancelling a pipeline abandons its work.
func (s *Subscriber) nackStranded(run uint64) {
	for _, m := range s.ext.Leased() {
		if message.HandedOffBy(m) == run && !m.Settled() {
			m.Nack()
		}
	}
}

// handOff is the source's hand-off hook, run on its hand-off goroutine
// just before a batch leaves it: settled messages (expired while
// buffered) are dropped; while the subscriber drains, the rest get the
// OnShutdown outcome instead of going on; otherwise, for a custom
// pipeline, they count as processing from here.
func (s *Subscriber) handOff(ctx context.Context, ms []*Message) []*Message {
	r, _ := ctx.Value(runKey{}).(*run)
	keep := ms[:0]
	for _, m := range ms {
		switch {
		case m.Settled():
		case s.draining.Load():
			message.Settle(m, s.cfg.OnShutdown, s.cfg.ShutdownNackDelay)
		default:
			if r != nil && r.mark {
				s.markHanded(r.id, m)
			}
			keep = append(keep, m)
		}
	}
	clear(ms[len(keep):])
	return keep
}

// markHanded records that m left the subscriber's buffers for processing;
// marked before it goes, as the receiver may settle it at once.
func (s *Subscriber) markHanded(run uint64, m *Message) {
	if message.MarkHandedOffBy(m, run) {
		s.c.handed.Add(1)
	}
}

// receipt is the source's receipt step, run on a stream's goroutine for
// each response the moment it is decoded: bind the settle path, lease,
// count. No message waits anywhere before all three are done.
func (s *Subscriber) receipt(stream int, ms []*Message) {
	if s.tracing != nil {
		s.tracing.received(ms)
	}
	for _, m := range ms {
		message.Bind(m, (*settlePath)(s))
		if m.DeliveryAttempt > 1 {
			s.c.redelivered.Add(1)
		}
	}
	s.c.received.Add(uint64(len(ms)))
	s.tracker.Receive(stream, ms)
	s.gate.Receive(stream, ms)
}

func (s *Subscriber) unsentOne(m *Message) { s.unsent([]*Message{m}) }

// unsent settles what the source received but will not hand on: with the
// OnShutdown outcome while the subscriber drains, else (a stopped
// pipeline) a nack, so the server redelivers it at once.
func (s *Subscriber) unsent(ms []*Message) {
	for _, m := range ms {
		if s.draining.Load() {
			message.Settle(m, s.cfg.OnShutdown, s.cfg.ShutdownNackDelay)
		} else {
			m.Nack()
		}
	}
}

// Acknowledge returns the sink paired with Source: each message that
// reaches it without an outcome gets the OnSuccess outcome (default ack);
// the settle path releases its permit and lease.
func (s *Subscriber) Acknowledge() stage.Sink[*Message] {
	return sink.Acknowledge(s.policy)
}

// Handler processes one message. Returning nil applies OnSuccess (default
// ack), an error OnFailure (default nack), unless the handler settled the
// message itself. It must return when ctx is done.
type Handler func(ctx context.Context, m *Message) error

// Process returns the processing stage Run uses: parallelism fixed
// workers calling handler; when the subscription orders by key (or
// Ordering is set), one message per ordering key at a time, in order. A
// panicking handler nacks its message and is logged; the subscriber goes on.
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
	call := func(ctx context.Context, m *Message) (*Message, error) {
		if m.Settled() {
			return m, nil
		}
		if !message.HandedOff(m) {
			if s.draining.Load() {
				message.Settle(m, s.cfg.OnShutdown, s.cfg.ShutdownNackDelay)
				return m, nil
			}
			s.markHanded(1, m)
		}
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
	opt := operators.Options[*Message, *Message]{Emit: emit}
	if s.ordered {
		opt.Mode = operators.Keyed
		opt.Key = orderingKey
	}
	return operators.ParallelMap(parallelism, call, opt)
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
			err = &operators.PanicError{Value: p, Stack: debug.Stack()}
			s.c.setErr(err)
			if s.cfg.Logger != nil {
				s.cfg.Logger.Error("pubsubflow: handler panicked; message nacked",
					"subscription", s.sub, "message_id", m.ID, "panic", p)
			}
			m.Nack()
		}
	}()
	return h(ctx, m)
}

// Run receives and processes messages with parallelism workers calling
// handler until ctx is done or the subscriber is closed (both mean: stop
// and drain, then return nil), or a terminal error (subscription deleted,
// permission denied), which it returns. It returns only after every
// goroutine it started has exited — except a handler that ignores its ctx:
// once the drain timeout has passed and handlers' ctx was cancelled, Run
// waits one more second, then returns a *StuckHandlersError counting the
// handlers still running (their messages already nacked).
func (s *Subscriber) Run(ctx context.Context, parallelism int, handler Handler) error {
	if parallelism < 1 {
		return fmt.Errorf("pubsubflow: Run: parallelism %d, want ≥ 1", parallelism)
	}
	if handler == nil {
		return errors.New("pubsubflow: Run: nil handler")
	}
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	// The pipeline's own context is cancelled only after the drain timeout:
	// cancelling ctx means stop-and-drain, not abandon.
	pctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.runCancels[&cancel] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.runCancels, &cancel)
		s.mu.Unlock()
		cancel()
	}()

	done := make(chan error, 1)
	s.handling.Add(1)
	go func() {
		src := &subSource{s: s} // processing starts in the handler
		err := pipeline.FromContext(pctx, stage.Source[*Message](src)).Via(s.process(parallelism, handler, unsettled)).To(s.Acknowledge())
		s.handling.Add(-1)
		ping(s.runsDone)
		done <- err
	}()
	select {
	case err := <-done:
		// A terminal error: the pipeline has ended, so nothing is in
		// processing; nack what is still leased without waiting.
		closeErr := s.shutdownOnce(context.Background(), false)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
			return err
		}
		return closeErr
	case <-ctx.Done():
	case <-s.closed:
	}
	closeErr := s.Close()
	// Close has drained (up to the drain timeout), nacked what is left and
	// cancelled the pipeline. A handler that ignores its ctx would keep
	// Run waiting for ever: after a short grace Run returns and says so.
	grace := time.NewTimer(stuckGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		// ErrClosed here is our own close racing the pipeline's start.
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
			return err
		}
		return closeErr
	case <-grace.C:
		return errors.Join(closeErr, &StuckHandlersError{Running: int(s.c.inHandler.Load())})
	}
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
