package sink

import (
	"fmt"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
)

// Policy decides the outcome of a processed message, as
// SubscriberConfig's OnSuccess and OnFailure do. The zero value acks on success and
// nacks at once on failure.
type Policy struct {
	// OnSuccess is the outcome of a message processed without error
	// (zero: message.Ack). One of Ack, Nack, NackAfter, NoOp.
	OnSuccess message.Outcome
	// OnFailure is the outcome of a message whose processing failed
	// (zero: message.Nack, immediate redelivery). One of Ack, Nack,
	// NackAfter, NoOp.
	OnFailure message.Outcome
	// NackDelay is the redelivery delay of a NackAfter outcome, 0–600 s.
	NackDelay time.Duration
}

// Validate reports an outcome users may not choose or a delay out of range.
func (p Policy) Validate() error {
	for _, o := range []struct {
		name string
		o    message.Outcome
	}{{"OnSuccess", p.OnSuccess}, {"OnFailure", p.OnFailure}} {
		switch o.o {
		case message.Pending, message.Ack, message.Nack, message.NackAfter, message.NoOp:
		default:
			return fmt.Errorf("sink: Policy.%s %v must be ack, nack, nack-after or no-op", o.name, o.o)
		}
	}
	if p.NackDelay < 0 || p.NackDelay > 600*time.Second {
		return fmt.Errorf("sink: Policy.NackDelay %v must be within 0–600s", p.NackDelay)
	}
	return nil
}

func (p Policy) success() message.Outcome {
	if p.OnSuccess == message.Pending {
		return message.Ack
	}
	return p.OnSuccess
}

func (p Policy) failure() message.Outcome {
	if p.OnFailure == message.Pending {
		return message.Nack
	}
	return p.OnFailure
}

// Apply settles m by p: OnSuccess when err is nil, OnFailure otherwise.
// Handler wrappers call it with the handler's error. It reports whether it
// set the outcome (false: the message was settled already, e.g. the
// handler acked it or its lease expired).
func Apply(m *message.Message, err error, p Policy) bool {
	o := p.success()
	if err != nil {
		o = p.failure()
	}
	return message.Settle(m, o, p.NackDelay)
}
