package pubsubflow

import "github.com/pubsubflow/pubsubflow/internal/message"

// Message is one received message; see message.Message. Handlers settle it
// with Ack, Nack, NackAfter or NoOp (the first outcome wins), or leave it to
// the outcome policy.
type Message = message.Message

// Outcome is what happens to a received message; see message.Outcome.
type Outcome = message.Outcome

// The outcomes a policy may choose.
const (
	Ack       = message.Ack
	Nack      = message.Nack
	NackAfter = message.NackAfter
	NoOp      = message.NoOp
)

// AckResult is the server's confirmation of an ack or nack on an
// exactly-once subscription, from Message.Result: Wait returns nil once
// the server confirmed it, or the reason it failed (for example an ack id
// that expired before the ack reached the server).
type AckResult = message.Result
