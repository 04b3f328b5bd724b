package flow

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// errNilExtender fails a pipeline built with EagerTrack(nil, …).
var errNilExtender = errors.New("flow: EagerTrack needs an Extender")

// Tracker is the eager lease-tracking stage: it leases every message with
// its Extender the moment it arrives, whatever downstream does (a
// message waiting unleased behind a slow stage would be redelivered).
//
// Right after source.Subscribe it is fused into the source (a
// source.Step) and leases where each response is decoded. Anywhere else it
// is an eager stage with a bounded buffer (MaxBuffer) that leases on
// receipt and emits in order; a message reaching it later than LateAfter
// after its receipt means a buffer before it, and it warns once.
//
// When its Extender can no longer keep the leases, the pipeline ends with
// ErrExtenderClosed or ErrModacksFailing (fused at once, else at the next
// message). An exactly-once message is handed on only once its receipt
// modack is confirmed; one settled while buffered is skipped.
type Tracker struct {
	// MaxBuffer bounds the messages a standalone tracker holds (0: 1000,
	// the Pub/Sub clients' default outstanding messages).
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
// it leases each batch, holds exactly-once messages until confirmed, sets
// the streams' ack deadline, and ends the source's runs once the Extender
// stops. A tracker without an Extender fails at once.
func (t *Tracker) Receipt(message.Key) source.Receipt {
	if t.ext == nil {
		return source.Receipt{Receive: func(int, []*source.Message) {}, Failed: closedChan, Err: func() error { return errNilExtender }}
	}
	ext := t.ext
	return source.Receipt{
		Receive:     func(_ int, ms []*source.Message) { ext.track(ms) },
		Ready:       ext.confirmed,
		AckDeadline: ext.currentDeadline,
		Failed:      ext.stopped.Done,
		Err:         ext.stoppedErr,
	}
}

// closedChan is a failure that holds from the start.
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
		Bound: cmpOr(t.MaxBuffer, 1000),
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

// LateAfter is how long after its receipt a message may reach a standalone
// EagerTrack or FlowGate before the stage warns that a buffer sits before
// it: messages waiting there were not leased (or counted) on receipt.
const LateAfter = time.Second

// lateWarning says once per stage that messages reach it late.
type lateWarning struct{ once sync.Once }

func (w *lateWarning) check(log *slog.Logger, m *source.Message, stage, fix string) {
	if m.ReceiveTime.IsZero() {
		return
	}
	if waited := time.Since(m.ReceiveTime); waited >= LateAfter {
		w.once.Do(func() {
			if log == nil {
				log = slog.Default()
			}
			log.Warn("pubsubflow: "+stage+" sits behind a buffer: messages reach it long after receipt, and were not covered while they waited",
				"stage", stage, "waited", waited, "message_id", m.ID, "fix", fix)
		})
	}
}
