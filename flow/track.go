package flow

import (
	"context"
	"errors"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// DefaultTrackBuffer is the buffer bound of EagerTrack when maxBuffer is 0:
// 1000 messages, the Pub/Sub clients' default outstanding messages.
const DefaultTrackBuffer = 1000

// errNilExtender fails a pipeline built with EagerTrack(nil, …).
var errNilExtender = errors.New("flow: EagerTrack needs a Extender")

// Tracker is the eager lease-tracking stage. It receives whenever its
// buffer has room, tracks each message with its Extender at once (the
// lease is extended from then on, whatever downstream does), buffers it,
// and emits in order on downstream demand. With a full buffer it stops
// receiving, so the backpressure reaches the stream and the server.
//
// A one-in-one-out step that tracked only when downstream pulled would
// leave every message waiting behind a slow stage untracked, and the
// server would redeliver it.
//
// The same tracking is also a receipt step (Receive), which a source runs
// where it decodes a response (source.Config.Receipt): then no message
// waits anywhere, not even in the source, before it is leased. That is how
// a Subscriber composes it.
//
// On an exactly-once subscription a message is emitted only after its
// receipt modack was confirmed. A message settled while buffered (its lease
// passed the maximum extension, or its receipt modack failed permanently,
// or shutdown nacked it) is skipped.
type Tracker struct {
	// Extender takes the leases. Required.
	Extender *Extender

	// MaxBuffer bounds the messages held (0: DefaultTrackBuffer).
	MaxBuffer int

	// OnReceive, if set, runs for each message on receipt (on the stage's
	// goroutine, or in Receive on the caller's), just before its lease is
	// taken: a chain binds its settle path there. It must not block.
	OnReceive func(m *message.Message)

	// OnDrop receives each message the stage still holds when it stops
	// without emitting it (cancellation or Discard). Nil means do nothing:
	// the message stays leased and the Subscriber nacks what is still
	// leased at shutdown (Extender.Leased).
	OnDrop func(m *message.Message)

	// Discard, if set, is closed to make the stage drop (OnDrop) what it
	// holds and what it still receives, instead of emitting it.
	Discard <-chan struct{}

	// Observe, if set, is called with the buffered count after each change,
	// on the stage's goroutine.
	Observe func(buffered int)
}

// EagerTrack returns the eager lease-tracking stage on ext with a buffer
// of maxBuffer messages (0: DefaultTrackBuffer). Like every stage it also
// runs inside a go-streams graph through pipeline.NewStreamsFlow.
func EagerTrack(ext *Extender, maxBuffer int) stage.Flow[*message.Message, *message.Message] {
	return &Tracker{Extender: ext, MaxBuffer: maxBuffer}
}

// Run starts the stage's goroutine under g and returns its output.
func (t *Tracker) Run(g *stage.Group, in <-chan *message.Message) <-chan *message.Message {
	if t.Extender == nil {
		g.Fail(errNilExtender)
		out := make(chan *message.Message)
		close(out)
		return out
	}
	ext := t.Extender
	bound := t.MaxBuffer
	if bound <= 0 {
		bound = DefaultTrackBuffer
	}
	e := &stage.Eager[*message.Message]{
		Bound: bound,
		OnReceive: func(_ context.Context, m *message.Message) error {
			t.receive([]*message.Message{m})
			return nil
		},
		Ready:   ext.Confirmed,
		Skip:    (*message.Message).Settled,
		OnDrop:  t.OnDrop,
		Discard: t.Discard,
		Observe: t.Observe,
	}
	return e.Run(g, in)
}

// Receive is the tracker's receipt step: OnReceive, then the lease, for
// every message of a batch, at once (source.Config.Receipt runs it where
// a response is decoded). It never blocks.
func (t *Tracker) Receive(_ int, ms []*message.Message) { t.receive(ms) }

func (t *Tracker) receive(ms []*message.Message) {
	if t.OnReceive != nil {
		for _, m := range ms {
			t.OnReceive(m)
		}
	}
	t.Extender.TrackAll(ms)
}

// Ready is the hand-on condition of a tracked message
// (source.Config.Ready): on an exactly-once subscription, closed once its
// receipt modack is confirmed; otherwise nil (ready now).
func (t *Tracker) Ready(m *message.Message) <-chan struct{} { return t.Extender.Confirmed(m) }
