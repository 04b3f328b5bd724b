package flow

import (
	"context"
	"errors"
	"log/slog"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// defaultTrackBuffer is the buffer bound of a standalone EagerTrack when
// maxBuffer is 0: 1000 messages, the Pub/Sub clients' default outstanding
// messages.
const defaultTrackBuffer = 1000

// errNilExtender fails a pipeline built with EagerTrack(nil, …).
var errNilExtender = errors.New("flow: EagerTrack needs an Extender")

// Tracker is the eager lease-tracking stage: it takes a lease with its
// Extender for every message the moment it arrives, so the lease is
// extended from then on, whatever downstream does; the message's settle
// path ends the lease. A one-in-one-out step that tracked only when
// downstream pulled would leave every message waiting behind a slow stage
// untracked, and the server would redeliver it.
//
// Written right after source.Subscribe in a pipeline, it is fused into
// the source (it is a source.Step): it then runs where each response is
// decoded, and no message waits anywhere, not even in the source, before
// it is leased. Anywhere else it runs as an eager stage with a bounded
// buffer (MaxBuffer): it receives whenever the buffer has room, leases at
// once, and emits in order on downstream demand. A message that reaches it
// long after it was decoded (LateAfter) means a buffer sits before it, where
// messages wait unleased: it says so once, at Warn, naming the fix.
//
// When its Extender can no longer keep the leases (closed, or modacks
// failing for good), the pipeline ends with ErrExtenderClosed or
// ErrModacksFailing: fused, at once (Failed); as a stage, at the next
// message it receives.
//
// On an exactly-once subscription a message is handed on only after its
// receipt modack was confirmed (Ready). A message settled while buffered
// (its lease expired, say) is skipped.
type Tracker struct {
	// MaxBuffer bounds the messages a standalone tracker holds (0: 1000).
	MaxBuffer int
	// Logger receives the one warning about a buffer before the stage
	// (nil: slog.Default()).
	Logger *slog.Logger

	ext  *Extender
	late lateWarning
}

// EagerTrack returns the eager lease-tracking stage on ext with a buffer
// of maxBuffer messages when it runs standalone (0: 1000).
// Like every stage it also runs inside a go-streams graph through
// pipeline.NewStreamsFlow.
func EagerTrack(ext *Extender, maxBuffer int) *Tracker {
	return &Tracker{ext: ext, MaxBuffer: maxBuffer}
}

var (
	_ source.Step                                  = (*Tracker)(nil)
	_ stage.Flow[*source.Message, *source.Message] = (*Tracker)(nil)
)

// Receipt is the tracker's part when fused into a source (source.Step):
// it leases every message of a batch at once; on an exactly-once
// subscription a message is handed on once its receipt modack is
// confirmed; the streams take the extender's deadline as their stream ack
// deadline; and once the Extender can no longer keep the leases (it was
// closed, or its modacks fail for good) every run of the source ends with
// why (ErrExtenderClosed, ErrModacksFailing) rather than hand on messages
// nobody extends. A tracker without an Extender fails at once.
func (t *Tracker) Receipt(message.Key) source.Receipt {
	if t.ext == nil {
		return source.Receipt{Receive: func(int, []*source.Message) {}, Failed: closedChan, Err: func() error { return errNilExtender }}
	}
	ext := t.ext
	return source.Receipt{
		Receive:     func(_ int, ms []*source.Message) { ext.track(ms) },
		Ready:       ext.confirmed,
		AckDeadline: ext.currentDeadline,
		Failed:      func() <-chan struct{} { return ext.stopped },
		Err:         ext.stoppedErr,
	}
}

// closedChan returns a closed channel: a failure that holds from the start.
func closedChan() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Run starts the standalone stage's goroutine under g and returns its
// output.
func (t *Tracker) Run(g *stage.Group, in <-chan *source.Message) <-chan *source.Message {
	if t.ext == nil {
		g.Fail(errNilExtender)
		out := make(chan *source.Message)
		close(out)
		return out
	}
	e := &stage.Eager[*source.Message]{
		Bound: cmpOr(t.MaxBuffer, defaultTrackBuffer),
		OnReceive: func(_ context.Context, m *source.Message) error {
			if err := t.ext.stoppedErr(); err != nil {
				return err // the message is dropped: OnDrop nacks it
			}
			t.late.check(t.Logger, m, "flow.EagerTrack", "put EagerTrack right after source.Subscribe (pipeline.From(src).Via(flow.EagerTrack(ext, 0))) so it leases on receipt")
			t.ext.track([]*source.Message{m})
			return nil
		},
		Ready:  t.ext.confirmed,
		Skip:   (*source.Message).Settled,
		OnDrop: func(m *source.Message) { m.Nack() },
	}
	return e.Run(g, in)
}

func cmpOr(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}
