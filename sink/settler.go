package sink

import (
	"time"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

// Leases is what the settle path needs from the lease manager:
// flow.Extender implements it. Release stops extending m's lease and, on
// Ack, records m's processing latency (receipt to ack) for the adaptive
// ack deadline.
type Leases interface {
	Release(m *message.Message, o message.Outcome)
}

// Settler is a subscriber's settle path; it implements message.Settler.
// Bind it to every message on receipt. It is safe for concurrent use and
// never blocks on an RPC.
type Settler struct {
	acks   *ack.Acknowledger
	fc     *flow.FlowControl
	leases Leases

	// ReleaseAfterAck leaves the lease of an acked message in place, to be
	// released when the acknowledger reports the ack final
	// (ack.Config.OnAcked wired to flow.Extender.ReleaseAcked), so the
	// lease keeps being extended while a slow Acknowledge is on its way.
	// Nacks always release at once: an extension after a nack would undo it.
	ReleaseAfterAck bool
}

// NewSettler returns the settle path over the shared acknowledger, flow
// budget and lease manager. fc or leases may be nil (no flow control, no
// lease management); a nil acks sends nothing (local settling only, for
// tests).
func NewSettler(acks *ack.Acknowledger, fc *flow.FlowControl, leases Leases) *Settler {
	return &Settler{acks: acks, fc: fc, leases: leases}
}

// Settle releases m's flow permits and lease, then queues what outcome o
// tells the server: Ack → Acknowledge, Nack → ModifyAckDeadline 0,
// NackAfter → ModifyAckDeadline delay (whole seconds, rounded up, at most
// 600); NoOp and Expired send nothing. For an exactly-once message it sets
// m's Result (settled when the server confirmed) before it returns, so
// m.Result() is ready as soon as m.Ack() returns.
func (s *Settler) Settle(m *message.Message, o message.Outcome, delay time.Duration) {
	if s.fc != nil {
		s.fc.ReleaseMessage(m)
	}
	if s.leases != nil && !(o == message.Ack && s.ReleaseAfterAck && s.acks != nil) {
		s.leases.Release(m, o)
	}
	if s.acks == nil {
		return
	}
	var r *message.Result
	switch o {
	case message.Ack:
		if m.ExactlyOnce {
			r = s.acks.AckWithResult(m.AckID)
		} else {
			r = s.acks.Ack(m.AckID)
		}
	case message.Nack, message.NackAfter:
		if o == message.Nack {
			delay = 0
		}
		if m.ExactlyOnce {
			r = s.acks.NackWithResult(m.AckID, delay)
		} else {
			r = s.acks.Nack(m.AckID, delay)
		}
	}
	if r != nil {
		message.SetResult(m, r)
	}
}
