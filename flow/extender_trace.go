package flow

import "github.com/pubsubflow/pubsubflow/internal/message"

// Tracer traces the extender's ModifyAckDeadline RPCs (the subscriber's
// OpenTelemetry tracing implements it). Nil, the default, costs one nil
// check per RPC attempt and nothing per lease.
type Tracer interface {
	// StartModack is called before each attempt of a ModifyAckDeadline
	// that sets seconds for ms: the receipt modack (receipt) or a lease
	// extension. The returned function is called once with the attempt's
	// error (nil: the server accepted it). ms must not be kept.
	StartModack(receipt bool, seconds int32, ms []*message.Message) func(error)
}

// startTrace starts the tracing of one attempt of j (nil when not traced).
func (e *Extender) startTrace(j job) func(error) {
	if e.cfg.Tracer == nil {
		return nil
	}
	ms := make([]*message.Message, len(j.leases))
	for i, l := range j.leases {
		ms[i] = l.m
	}
	return e.cfg.Tracer.StartModack(j.receipt, j.secs, ms)
}
