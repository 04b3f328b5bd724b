package flow

import (
	"log/slog"
	"sync"
	"time"

	"github.com/pubsubflow/pubsubflow/source"
)

// LateAfter is how long after its receipt a message may reach a standalone
// EagerTrack or FlowGate before the stage warns that a buffer sits before
// it: messages waiting there were not leased (or counted) on receipt.
const LateAfter = time.Second

// lateWarning says once, per stage, that messages reach it late.
type lateWarning struct {
	once sync.Once
}

func (w *lateWarning) check(log *slog.Logger, m *source.Message, stage, fix string) {
	if m.ReceiveTime.IsZero() {
		return
	}
	waited := time.Since(m.ReceiveTime)
	if waited < LateAfter {
		return
	}
	w.once.Do(func() {
		if log == nil {
			log = slog.Default()
		}
		log.Warn("pubsubflow: "+stage+" sits behind a buffer: messages reach it long after receipt, and were not covered while they waited",
			"stage", stage, "waited", waited, "message_id", m.ID, "fix", fix)
	})
}
