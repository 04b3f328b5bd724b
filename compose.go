package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Source returns the subscriber's source: the StreamingPull streams, then
// EagerTrack and FlowGate, so every message is leased and counted from the
// moment it is received. Restart wraps only the streams: the lease table,
// the flow budget and the buffered messages survive reconnects. Pair it
// with Acknowledge (or settle each message yourself).
//
// The source ends when the subscriber shuts down (after handing its
// buffered messages to the OnShutdown outcome) or on a terminal stream
// error, which the pipeline returns. A pipeline stopped by its own context
// or a failing stage nacks what it held and what it was handed but did not
// settle, so a later pipeline on the same subscriber gets them again.
func (s *Subscriber) Source() stage.Source[*Message] {
	return stage.SourceFunc[*Message](s.runSource)
}

func (s *Subscriber) runSource(g *stage.Group) <-chan *Message {
	if s.closing.Load() {
		g.Fail(ErrClosed)
		out := make(chan *Message)
		close(out)
		return out
	}
	s.active.Add(1)
	s.runs.Add(1)
	// This run's own goroutines (streams, EagerTrack, FlowGate) live in a
	// group of their own: its exit is the end of the run, Close waits for
	// it, and shutdown can stop it once the drain timeout has passed even if
	// the pipeline downstream no longer reads.
	rg := stage.NewGroup(g.Context())
	stopRun := context.AfterFunc(s.abandon, rg.Cancel)
	// The streams stop when the pipeline stops or the subscriber drains;
	// their terminal error fails the pipeline.
	streamsCtx, stopStreams := context.WithCancel(rg.Context())
	unhook := context.AfterFunc(s.life, stopStreams)
	streams := stage.NewGroup(streamsCtx)
	raw := s.src.Run(streams)
	rg.Go(func(context.Context) error {
		err := streams.Wait()
		unhook()
		stopStreams()
		return ignoreCanceled(err)
	})
	// A stopped pipeline's buffered messages are nacked (OnDrop), so the
	// server redelivers them to the next run at once.
	tracked := (&flow.Tracker{Extender: s.ext, MaxBuffer: s.cfg.MaxBuffer, OnDrop: nack}).Run(rg, raw)
	// The hand-off decision runs on the gate's goroutine (HandOff), so a
	// message drained at shutdown never leaves the gate.
	run := s.nextRun.Add(1)
	gated := (&flow.Gate{Flow: s.fc, HandOff: func(m *Message) bool { return s.handOff(run, m) }}).Run(rg, tracked)
	handedOff := make(chan struct{})
	g.Go(func(context.Context) error {
		err := rg.Wait()
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
		s.nackStranded(run)
		return nil
	})
	return gated
}

// ignoreCanceled drops the error of a group stopped by cancellation.
func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func nack(m *Message) { m.Nack() }

// nackStranded nacks what a stopped pipeline was handed and left
// unsettled (dropped by one of its stages, or in flight when it was
// cancelled), so it is neither held until max extension nor counted as
// processing forever. A handler still running on such a message finds its
// outcome already taken: cancelling a pipeline abandons its work.
func (s *Subscriber) nackStranded(run uint64) {
	for _, m := range s.ext.Leased() {
		if m.HandedOffBy() == run && !m.Settled() {
			m.Nack()
		}
	}
}

// handOff is the gate's HandOff hook: it passes a message to processing
// (true), or, once the subscriber drains, settles it with the OnShutdown
// outcome instead (false).
func (s *Subscriber) handOff(run uint64, m *Message) bool {
	if m.Settled() {
		return false
	}
	if s.draining.Load() {
		m.Settle(s.cfg.OnShutdown, s.cfg.ShutdownNackDelay)
		return false
	}
	// Marked before the send: the receiver may settle it at once.
	if m.MarkHandedOffBy(run) {
		s.c.handed.Add(1)
	}
	return true
}

// receive runs on the stream's goroutine the moment a message is decoded:
// it binds the settle path and takes the lease, so a message is leased
// even while it waits in the source's hands for the pipeline to take it
// (EagerTrack then finds it tracked and only buffers it).
func (s *Subscriber) receive(m *Message) {
	m.Bind(s)
	s.ext.Track(m)
	s.c.received.Add(1)
	if m.DeliveryAttempt > 1 {
		s.c.redelivered.Add(1)
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
// for the others, and not handing them over saves a goroutine switch per
// message.
func (s *Subscriber) process(parallelism int, handler Handler, emit func(*Message) bool) stage.Flow[*Message, *Message] {
	call := func(ctx context.Context, m *Message) (*Message, error) {
		sink.Apply(m, s.safeHandle(ctx, handler, m), s.policy)
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

// PanicError is the handler failure recorded for a panicking handler.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("pubsubflow: handler panicked: %v", e.Value) }

func (s *Subscriber) safeHandle(ctx context.Context, h Handler, m *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
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
// goroutine it started has exited.
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
	go func() {
		done <- pipeline.FromContext(pctx, s.Source()).Via(s.process(parallelism, handler, unsettled)).To(s.Acknowledge())
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
	// ErrClosed here is our own close racing the pipeline's start.
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
		return err
	}
	return closeErr
}
