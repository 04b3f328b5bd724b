// Package message defines Message, the element that flows through every
// pubsubflow subscriber stage, and its settle path: the first outcome
// (ack, nack, nack after a delay, no-op, expiry) wins, and exactly one call
// reaches the Settler that releases the message's flow permit and lease and
// sends the ack or nack. The root package re-exports these types.
package message

import (
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// Outcome is what happens to a received message.
type Outcome uint32

const (
	// Pending: no outcome yet.
	Pending Outcome = iota
	// Ack: processed; the server forgets the message.
	Ack
	// Nack: redeliver now (ModifyAckDeadline 0).
	Nack
	// NackAfter: redeliver after a delay (ModifyAckDeadline d).
	NackAfter
	// NoOp: release the message locally and send nothing; the server
	// redelivers it when its current deadline passes.
	NoOp
	// Expired: the lease passed its maximum extension and was dropped; the
	// server redelivers. Set by the lease manager, not by users.
	Expired
)

var outcomeNames = [...]string{"pending", "ack", "nack", "nack-after", "no-op", "expired"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Settler is the one settle path of a subscriber. Settle is called exactly
// once per message, with the winning outcome.
type Settler interface {
	Settle(m *Message, o Outcome, delay time.Duration)
}

// Message is one received Pub/Sub message. Its exported fields are read-only
// for handlers; its outcome is set through Ack, Nack, NackAfter or NoOp,
// which are safe to call from any goroutine and idempotent: the first wins.
type Message struct {
	ID              string
	AckID           string
	Data            []byte
	Attributes      map[string]string
	OrderingKey     string
	DeliveryAttempt int
	PublishTime     time.Time
	// ReceiveTime is when the client received the message (start of the
	// processing latency recorded for adaptive deadlines).
	ReceiveTime  time.Time
	Subscription string
	// ExactlyOnce and Ordered are the subscription's properties as the
	// server reported them with this message.
	ExactlyOnce bool
	Ordered     bool

	size    int
	mu      sync.Mutex // orders Settle and Bind
	outcome atomic.Uint32
	delay   time.Duration
	settler Settler
	result  *Result
	handed  atomic.Uint64 // 0: not handed off; else the hand-off's owner
	trace   *Trace        // nil unless the subscriber traces
}

// FromReceived builds a Message from a StreamingPull response element.
func FromReceived(rm *pubsubpb.ReceivedMessage, subscription string, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, now time.Time) *Message {
	m := new(Message)
	m.decode(rm, subscription, props, now)
	return m
}

// FromResponse decodes a StreamingPull response's messages into one
// allocation (a response's messages live and die together closely enough
// that one slab per response costs less than one object per message) and
// appends pointers to them to dst.
func FromResponse(dst []*Message, rms []*pubsubpb.ReceivedMessage, subscription string, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, now time.Time) []*Message {
	slab := make([]Message, len(rms))
	for i, rm := range rms {
		slab[i].decode(rm, subscription, props, now)
		dst = append(dst, &slab[i])
	}
	return dst
}

// decode fills a zero Message from a StreamingPull response element.
func (m *Message) decode(rm *pubsubpb.ReceivedMessage, subscription string, props *pubsubpb.StreamingPullResponse_SubscriptionProperties, now time.Time) {
	pm := rm.GetMessage()
	*m = Message{
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
	m.size = protoSize(rm)
}

// Size is the message's size in bytes as flow control counts it: the
// encoded size of the Pub/Sub message (data, attributes, ids, publish
// time), as the service counts it.
func (m *Message) Size() int { return m.size }

// SetSize overrides m's Size (for messages built by hand in tests).
func SetSize(m *Message, n int) { m.size = n }

// Bind attaches m's settle path. A subscriber binds each message on
// receipt; an outcome set before Bind is applied by Bind.
func Bind(m *Message, s Settler) {
	m.mu.Lock()
	o := Outcome(m.outcome.Load())
	if o == Pending {
		m.settler = s
	}
	m.mu.Unlock()
	if o != Pending {
		s.Settle(m, o, m.delay)
	}
}

// Ack acknowledges the message. It reports whether this call set the
// outcome (false: an earlier outcome won).
func (m *Message) Ack() bool { return Settle(m, Ack, 0) }

// Nack asks for redelivery now.
func (m *Message) Nack() bool { return Settle(m, Nack, 0) }

// NackAfter asks for redelivery after d (rounded to whole seconds, at most
// 600 s, the API's limit).
func (m *Message) NackAfter(d time.Duration) bool { return Settle(m, NackAfter, d) }

// NoOp releases the message locally without telling the server.
func (m *Message) NoOp() bool { return Settle(m, NoOp, 0) }

// Settle sets m's outcome o if none is set yet and hands the message to
// its settle path, exactly once. It is what Ack, Nack, NackAfter and NoOp
// call; the lease and shutdown paths use it for Expired and OnShutdown.
func Settle(m *Message, o Outcome, delay time.Duration) bool {
	if o == Pending {
		return false
	}
	m.mu.Lock()
	if m.outcome.Load() != uint32(Pending) {
		m.mu.Unlock()
		return false
	}
	m.delay = delay
	m.outcome.Store(uint32(o))
	s := m.settler
	m.settler = nil
	m.mu.Unlock()
	if s != nil {
		s.Settle(m, o, delay)
	}
	return true
}

// Outcome returns the outcome set so far (Pending if none).
func (m *Message) Outcome() Outcome { return Outcome(m.outcome.Load()) }

// Settled reports whether an outcome has been set.
func (m *Message) Settled() bool { return m.Outcome() != Pending }

// Delay is the redelivery delay of m's NackAfter outcome.
func Delay(m *Message) time.Duration { return m.delay }

// Result returns the exactly-once ack result, or nil when the message's
// subscription is not exactly-once or the settle path set none.
func (m *Message) Result() *Result { return m.result }

// SetResult attaches m's exactly-once result (by the settle path).
func SetResult(m *Message, r *Result) { m.result = r }

// MarkHandedOff records that m left the subscriber's buffers for
// processing (the Subscriber's stats tell buffered and processing apart).
// It reports false if it was already marked.
func MarkHandedOff(m *Message) bool { return MarkHandedOffBy(m, 1) }

// MarkHandedOffBy is MarkHandedOff naming the pipeline (a non-zero id) the
// message was handed to, so that pipeline's stop can find what it left
// unsettled.
func MarkHandedOffBy(m *Message, owner uint64) bool { return m.handed.CompareAndSwap(0, owner) }

// HandedOff reports whether m was handed off.
func HandedOff(m *Message) bool { return m.handed.Load() != 0 }

// HandedOffBy returns the owner given to MarkHandedOffBy (1 for
// MarkHandedOff, 0 if not handed off).
func HandedOffBy(m *Message) uint64 { return m.handed.Load() }
