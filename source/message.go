package source

import (
	"context"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

// Outcome is what happens to a received message.
type Outcome uint32

// The outcomes, numbered as internal/message's.
const (
	// Pending: no outcome yet (the zero value).
	Pending = Outcome(message.Pending)
	// Ack: processed; the server forgets the message.
	Ack = Outcome(message.Ack)
	// Nack: redeliver now (ModifyAckDeadline 0).
	Nack = Outcome(message.Nack)
	// NackAfter: redeliver after a delay (ModifyAckDeadline d).
	NackAfter = Outcome(message.NackAfter)
	// NoOp: release the message locally and send nothing; the server
	// redelivers it when its current deadline passes.
	NoOp = Outcome(message.NoOp)
	// Expired: the lease ended without a confirmed extension, so the
	// server may have given the message out again. Set by the library,
	// never by users; an Ack after it does nothing.
	Expired = Outcome(message.Expired)
)

var outcomeNames = [...]string{"pending", "ack", "nack", "nack-after", "no-op", "expired"}

// String names the outcome ("ack", "nack", …).
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Message is one received Pub/Sub message; its exported fields are
// read-only. Ack, Nack, NackAfter and NoOp are safe from any goroutine,
// anywhere in a pipeline: the first outcome wins and reaches the settle
// path of the Source that received the message once, which gives back
// what every stage took for it and sends the ack or nack. There is
// nothing for a caller to pair.
type Message struct {
	ID              string
	AckID           string
	Data            []byte
	Attributes      map[string]string
	OrderingKey     string
	DeliveryAttempt int
	PublishTime     time.Time
	// ReceiveTime is when the source decoded the message: its lease
	// starts there.
	ReceiveTime time.Time
	// Subscription is the full name of the subscription it came from.
	Subscription string
	// ExactlyOnce and Ordered are the subscription's properties as the
	// server reported them with this message.
	ExactlyOnce bool
	Ordered     bool

	st     message.State
	result atomic.Pointer[AckResult]
	// reg is the registry shard the message is linked in while unsettled,
	// prev and next its neighbours there (guarded by the shard's lock).
	reg        *regShard
	prev, next *Message
}

func init() { message.Register(func(m any) *message.State { return &m.(*Message).st }) }

func (m *Message) settle(o Outcome, d time.Duration) bool { return m.st.Settle(m, uint32(o), d) }

// Ack acknowledges the message. It reports whether this call set the
// outcome (false: an earlier outcome won, or the lease had expired).
func (m *Message) Ack() bool { return m.settle(Ack, 0) }

// Nack asks for redelivery now.
func (m *Message) Nack() bool { return m.settle(Nack, 0) }

// NackAfter asks for redelivery after d (rounded up to whole seconds, at
// most 600 s, the API's limit).
func (m *Message) NackAfter(d time.Duration) bool { return m.settle(NackAfter, d) }

// NoOp releases the message locally without telling the server, which
// redelivers it once its current deadline passes.
func (m *Message) NoOp() bool { return m.settle(NoOp, 0) }

// Outcome returns the outcome set so far (Pending if none).
func (m *Message) Outcome() Outcome { return Outcome(m.st.Outcome()) }

// Settled reports whether the message has an outcome (expired included).
// It only reads: the library's lease checks expire a lapsed copy, and an
// outcome set on one becomes an expiry.
func (m *Message) Settled() bool { return m.st.Outcome() != message.Pending }

// Size is the message's size in bytes as flow control counts it: the
// encoded Pub/Sub message, as the service counts it.
func (m *Message) Size() int { return m.st.Size }

// Result returns the server's confirmation of the message's ack or nack
// on an exactly-once subscription, once Ack or Nack has returned; nil
// otherwise.
func (m *Message) Result() *AckResult { return m.result.Load() }

// AckResult is the server's confirmation of an ack or nack on an
// exactly-once subscription (Message.Result). It settles once.
type AckResult struct{ r ack.Result }

// Ready is closed when the result has settled (as publisher.Result's).
func (r *AckResult) Ready() <-chan struct{} { return r.r.Done() }

// Get blocks until the result settles or ctx is done. It returns nil once
// the server confirmed the ack or nack, else an *AckError or
// ErrLeaseExpired.
func (r *AckResult) Get(ctx context.Context) error { return r.r.Wait(ctx) }

// decodeResponse decodes a response's messages, each into its own record
// (a held message keeps only its own data alive, never its response's),
// bound to path with the deadline receipt plus the stream's ack deadline.
func decodeResponse(rms []*pubsubpb.ReceivedMessage, subscription string, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, now time.Time, deadline time.Duration, path message.Path, clock *message.Clock) []*Message {
	ms := make([]*Message, len(rms))
	for i, rm := range rms {
		pm := rm.GetMessage()
		m := &Message{
			ID:              pm.GetMessageId(),
			AckID:           rm.GetAckId(),
			Data:            pm.GetData(),
			Attributes:      pm.GetAttributes(),
			OrderingKey:     pm.GetOrderingKey(),
			DeliveryAttempt: int(rm.GetDeliveryAttempt()),
			ReceiveTime:     now,
			Subscription:    subscription,
			ExactlyOnce:     props.GetExactlyOnceDeliveryEnabled(),
			Ordered:         props.GetMessageOrderingEnabled(),
		}
		if ts := pm.GetPublishTime(); ts != nil {
			m.PublishTime = ts.AsTime()
		}
		m.st.Size = protoSize(rm)
		m.st.Path = path
		m.st.Clock = clock
		m.st.SetDeadline(now.Add(deadline), deadline)
		m.st.BeginReceipt()
		ms[i] = m
	}
	return ms
}
