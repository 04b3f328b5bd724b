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

// The outcomes. Pending is the zero value: none set yet.
const (
	// Pending: no outcome yet.
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
	// Expired: the message's lease ended without a confirmed extension
	// (past the maximum extension, or its deadline passed) and the server
	// may already have given it out again. Set by the lease extender, never
	// by users; an Ack after it does nothing.
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

// Message is one received Pub/Sub message. Its exported fields are
// read-only. Its outcome is set with Ack, Nack, NackAfter or NoOp, which
// are safe to call from any goroutine, anywhere in a pipeline: the first
// outcome wins, and it reaches the message's settle path once. That path
// belongs to the Source that received the message: it gives back what
// every stage took for the message (its lease, its flow permit) and sends
// the ack or nack. There is nothing for a caller to pair.
type Message struct {
	ID              string
	AckID           string
	Data            []byte
	Attributes      map[string]string
	OrderingKey     string
	DeliveryAttempt int
	PublishTime     time.Time
	// ReceiveTime is when the source decoded the message: its lease
	// starts there, and a stage can tell from it how long the message
	// waited before reaching it.
	ReceiveTime time.Time
	// Subscription is the full name of the subscription it came from.
	Subscription string
	// ExactlyOnce and Ordered are the subscription's properties as the
	// server reported them with this message.
	ExactlyOnce bool
	Ordered     bool

	st     message.State
	result atomic.Pointer[AckResult]
	// reg is the registry shard the message is linked in while unsettled
	// (set once, on receipt), and prev and next its neighbours there,
	// guarded by the shard's lock; nil once it has settled, so a settled
	// message points at no other.
	reg        *regShard
	prev, next *Message
}

func init() { message.Register(func(m any) *message.State { return &m.(*Message).st }) }

// Ack acknowledges the message. It reports whether this call set the
// outcome (false: an earlier outcome won, or the lease had expired).
func (m *Message) Ack() bool { return m.st.Settle(m, message.Ack, 0) }

// Nack asks for redelivery now.
func (m *Message) Nack() bool { return m.st.Settle(m, message.Nack, 0) }

// NackAfter asks for redelivery after d (rounded up to whole seconds, at
// most 600 s, the API's limit).
func (m *Message) NackAfter(d time.Duration) bool { return m.st.Settle(m, message.NackAfter, d) }

// NoOp releases the message locally without telling the server, which
// redelivers it once its current deadline passes.
func (m *Message) NoOp() bool { return m.st.Settle(m, message.NoOp, 0) }

// Outcome returns the outcome set so far (Pending if none).
func (m *Message) Outcome() Outcome { return Outcome(m.st.Outcome()) }

// Settled reports whether the message has an outcome (expired included).
// It only reads: a copy whose lease has lapsed is expired by the library's
// lease checks (the source's hand-off, the gates, the extender), and an
// outcome set on a lapsed copy becomes an expiry, so its ack is never sent.
func (m *Message) Settled() bool { return m.st.Outcome() != message.Pending }

// Size is the message's size in bytes as flow control counts it: the
// encoded Pub/Sub message (data, attributes, ids, publish time), as the
// service counts it.
func (m *Message) Size() int { return m.st.Size }

// Result returns the server's confirmation of the message's ack or nack
// on an exactly-once subscription, once Ack or Nack has returned; nil
// otherwise.
func (m *Message) Result() *AckResult { return m.result.Load() }

// AckResult is the server's confirmation of an ack or nack on an
// exactly-once subscription (Message.Result). It settles once.
type AckResult struct{ r ack.Result }

func newAckResult() *AckResult {
	r := new(AckResult)
	r.r.Init()
	return r
}

func (r *AckResult) resolve(err error) { r.r.AckDone(err) }

// Ready is closed when the result has settled (as publisher.Result's).
func (r *AckResult) Ready() <-chan struct{} { return r.r.Done() }

// Get blocks until the result settles or ctx is done. It returns nil once
// the server confirmed the ack or nack, or why it failed: an *AckError
// (for example an ack id that expired before the ack reached the server),
// or ErrLeaseExpired.
func (r *AckResult) Get(ctx context.Context) error { return r.r.Wait(ctx) }

// decodeResponse decodes a StreamingPull response's messages, each into
// its own record (a message held for long then keeps only its own data
// alive, never its response's: invariant 4), binds each to path, and
// returns them. Each message's server deadline starts as receipt plus the
// stream's ack deadline.
func decodeResponse(rms []*pubsubpb.ReceivedMessage, subscription string, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, now time.Time, deadline time.Duration, path message.Path, clock *message.Clock) []*Message {
	ms := make([]*Message, len(rms))
	due := now.Add(deadline)
	for i, rm := range rms {
		m := new(Message)
		m.decode(rm, subscription, props, now)
		m.st.Path = path
		m.st.Clock = clock
		m.st.SetDeadline(due, deadline)
		m.st.BeginReceipt() // the receipt steps attach without atomics; receipt ends it
		ms[i] = m
	}
	return ms
}

// decode fills a zero Message from a StreamingPull response element.
func (m *Message) decode(rm *pubsubpb.ReceivedMessage, subscription string, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, now time.Time) {
	pm := rm.GetMessage()
	m.ID = pm.GetMessageId()
	m.AckID = rm.GetAckId()
	m.Data = pm.GetData()
	m.Attributes = pm.GetAttributes()
	m.OrderingKey = pm.GetOrderingKey()
	m.DeliveryAttempt = int(rm.GetDeliveryAttempt())
	m.ReceiveTime = now
	m.Subscription = subscription
	m.ExactlyOnce = props.GetExactlyOnceDeliveryEnabled()
	m.Ordered = props.GetMessageOrderingEnabled()
	if ts := pm.GetPublishTime(); ts != nil {
		m.PublishTime = ts.AsTime()
	}
	m.st.Size = protoSize(rm)
}
