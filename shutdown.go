package pubsubflow

import (
	"context"
	"errors"
	"time"
)

// shutdownSlack is how far past its deadline each of a shutdown's last
// three waits (the runs' grace, the ack flush, the extender's in-flight
// modacks) may run, so a flush started at the deadline still gets a
// moment; the whole shutdown ends within 1 s of its deadline.
const shutdownSlack = 300 * time.Millisecond

// Close shuts the subscriber down gracefully (see Shutdown), bounded by the
// drain timeout. A second Close is harmless and returns the first result.
// Do not call Close from a handler: it would wait for that handler, up to
// the drain timeout. Call Shutdown with the handler's ctx instead.
func (s *Subscriber) Close() error { return s.Shutdown(context.Background()) }

// Shutdown stops the streams so nothing new arrives; settles messages not
// yet handed to processing with the OnShutdown outcome (default: nack after
// 5 s); waits up to the drain timeout (or ctx) for the runs to finish what
// they hold; nacks what is left; flushes the acks; stops lease extension;
// and returns after every goroutine the subscriber started has exited. A
// run started after Shutdown began fails with ErrClosed.
//
// Called from a handler with the handler's ctx, Shutdown starts the
// shutdown and returns at once (nil): waiting would wait for the handler
// itself.
func (s *Subscriber) Shutdown(ctx context.Context) error {
	if from, _ := ctx.Value(handlerKey{}).(*Subscriber); from == s {
		go func() { _ = s.shutdown(context.WithoutCancel(ctx), true) }()
		return nil
	}
	return s.shutdown(ctx, true)
}

// shutdown runs the shutdown once; later callers wait for it. drain false
// skips waiting for the runs (Run's pipeline has already ended).
func (s *Subscriber) shutdown(ctx context.Context, drain bool) error {
	idle, first := s.life.begin()
	if !first {
		select {
		case <-s.life.done:
			return s.life.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The drain is the source's (its DrainTimeout is ours): at its end it
	// abandons the runs still going, cancelling their pipelines and
	// nacking what they hold. ctx only ends it earlier.
	s.src.Stop()
	end := shutdownEnd(ctx, s.cfg.DrainTimeout)
	if drain {
		select {
		case <-idle:
		case <-s.src.Drained():
		case <-ctx.Done():
		}
	}
	// The drain is over: cancel Run's pipelines (ctx may have ended it
	// first), and give the runs a moment to end, so what their workers
	// settle on the way out still reaches the acknowledger. The source's
	// own goroutines have stopped with Stop; Close abandons any run it
	// still has and nacks what is left.
	s.life.abandon()
	wait(idle, min(stuckGrace, time.Until(end)+shutdownSlack))

	// The flush keeps the same deadline: what it cannot send by then
	// fails, counted in AckFailures and logged, never reported as acked.
	fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(end, time.Now()).Add(shutdownSlack))
	defer cancel()
	errs := []error{s.src.Close(fctx), s.ext.Close()}
	if s.tracing != nil {
		s.tracing.close()
	}
	s.closeParts(false)
	err := errors.Join(errs...)
	s.life.finish(err)
	return err
}

// shutdownEnd is when a shutdown starting now must be done: the drain
// timeout from now, or ctx's deadline when that comes first.
func shutdownEnd(ctx context.Context, drain time.Duration) time.Time {
	end := time.Now().Add(drain)
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		return d
	}
	return end
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// wait returns once done is closed or d has passed.
func wait(done <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// closeParts releases what NewSubscriber made; safe on a partly built one
// (failed: construction failed, so stop what was started too).
func (s *Subscriber) closeParts(failed bool) {
	s.disown()
	if failed {
		if s.src != nil {
			_ = s.src.Close(context.Background())
		}
		if s.ext != nil {
			_ = s.ext.Close()
		}
	}
	if s.tel != nil {
		s.tel.close()
	}
	if s.conn != nil {
		_ = s.conn.Close()
	}
}
