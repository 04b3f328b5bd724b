package pubsubflow

import "github.com/pubsubflow/pubsubflow/source"

// Message is one received message (source.Message): handlers settle it
// with Ack, Nack, NackAfter or NoOp (the first outcome wins), or leave it
// to the outcome policy.
type Message = source.Message

// Outcome is what happens to a received message (source.Outcome).
type Outcome = source.Outcome

// The outcomes a policy may choose.
const (
	Ack       = source.Ack
	Nack      = source.Nack
	NackAfter = source.NackAfter
	NoOp      = source.NoOp
)
