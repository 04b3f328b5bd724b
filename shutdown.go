package pubsubflow

import (
	"context"
	"errors"
	"time"
)

// flushTimeout bounds the final ack flush of a shutdown.
const flushTimeout = 30 * time.Second

// Close shuts the subscriber down gracefully (see Shutdown), bounded by the
// drain timeout. A second Close is harmless and returns the first result.
func (s *Subscriber) Close() error { return s.Shutdown(context.Background()) }

// Shutdown stops the streams so nothing new arrives; settles messages not
// yet handed to processing with the OnShutdown outcome (default: nack after
// 5 s); waits up to the drain timeout (or ctx) for messages in processing
// to settle; nacks what is left; flushes the acknowledger; stops lease
// extension; and returns after every goroutine the subscriber started has
// exited.
func (s *Subscriber) Shutdown(ctx context.Context) error {
	return s.shutdownOnce(ctx, true)
}

// shutdownOnce runs the shutdown once; later callers wait for it. drain
// false skips waiting for processing (Run's pipeline has already ended).
func (s *Subscriber) shutdownOnce(ctx context.Context, drain bool) error {
	// A channel, not a sync.Once: a second caller waits on it durably, so
	// shutdown also works inside a testing/synctest bubble.
	if s.closing.CompareAndSwap(false, true) {
		s.closeErr = s.shutdown(ctx, drain)
		close(s.closeDone)
		return s.closeErr
	}
	select {
	case <-s.closeDone:
		return s.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Subscriber) shutdown(ctx context.Context, drain bool) error {
	close(s.closed)
	s.draining.Store(true)
	s.stop()
	if drain {
		s.drain(ctx)
	}
	s.giveUp()

	// Nack what is still held (processing past the drain timeout, or
	// dropped by a foreign stage), then stop every pipeline of ours.
	for _, m := range s.ext.Leased() {
		m.Nack()
	}
	s.mu.Lock()
	for cancel := range s.runCancels {
		(*cancel)()
	}
	s.mu.Unlock()
	s.runs.Wait()

	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	errs := []error{s.acks.Close(fctx), s.ext.Close()}
	if s.tracing != nil {
		s.tracing.close()
	}
	s.closeParts()
	return errors.Join(errs...)
}

// drain waits until no pipeline of ours runs and nothing is in processing,
// or until the drain timeout or ctx ends. Run's pipelines count until they
// have ended: their workers settle the messages still queued for them
// (with the OnShutdown outcome) after the handlers before them return, and
// those settlements must reach the acknowledger before it closes.
func (s *Subscriber) drain(ctx context.Context) {
	timeout := time.NewTimer(s.cfg.DrainTimeout)
	defer timeout.Stop()
	for s.active.Load() > 0 || s.handling.Load() > 0 || s.Stats().Processing > 0 {
		select {
		case <-s.settledCh:
		case <-s.runsDone:
		case <-timeout.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// closeParts releases what NewSubscriber made; safe on a partly built one.
// The acknowledger and extender are closed here only when construction
// failed; shutdown closes them itself, in order, first.
func (s *Subscriber) closeParts() {
	if s.giveUp != nil {
		s.giveUp()
	}
	if s.life == nil { // construction failed: stop what was started
		if s.acks != nil {
			_ = s.acks.Close(context.Background())
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
