package sink

import (
	"fmt"
	"time"

	"github.com/pubsubflow/pubsubflow/source"
)

// Policy decides the outcome of a processed message, as
// SubscriberConfig's OnSuccess and OnFailure do. The zero value acks on
// success and nacks at once on failure.
type Policy struct {
	// OnSuccess is the outcome of a message processed without error
	// (zero: source.Ack). One of Ack, Nack, NackAfter, NoOp.
	OnSuccess source.Outcome
	// OnFailure is the outcome of a message whose processing failed
	// (zero: source.Nack). One of Ack, Nack, NackAfter, NoOp.
	OnFailure source.Outcome
	// NackDelay is the redelivery delay of a NackAfter outcome, 0–600 s.
	NackDelay time.Duration
}

// Validate reports an outcome users may not choose or a delay out of range.
func (p Policy) Validate() error {
	for i, o := range []source.Outcome{p.OnSuccess, p.OnFailure} {
		if o > source.NoOp {
			return fmt.Errorf("sink: Policy.%s %v must be ack, nack, nack-after or no-op", [...]string{"OnSuccess", "OnFailure"}[i], o)
		}
	}
	if p.NackDelay < 0 || p.NackDelay > 600*time.Second {
		return fmt.Errorf("sink: Policy.NackDelay %v must be within 0–600s", p.NackDelay)
	}
	return nil
}

// Apply settles m by p: OnSuccess when err is nil, OnFailure otherwise.
// It reports whether it set the outcome (false: the message was settled
// already, e.g. the handler acked it or its lease expired).
func Apply(m *source.Message, err error, p Policy) bool {
	o, zero := p.OnSuccess, source.Ack
	if err != nil {
		o, zero = p.OnFailure, source.Nack
	}
	if o == source.Pending {
		o = zero
	}
	return Settle(m, o, p.NackDelay)
}

// Settle sets m's outcome o (Ack, Nack, NackAfter with delay, or NoOp) if
// none is set yet, and reports whether it did.
func Settle(m *source.Message, o source.Outcome, delay time.Duration) bool {
	switch o {
	case source.Ack:
		return m.Ack()
	case source.Nack:
		return m.Nack()
	case source.NackAfter:
		return m.NackAfter(delay)
	case source.NoOp:
		return m.NoOp()
	}
	return false
}
