package flow

import (
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Gate is the eager flow-control stage: it takes a message's permits from
// its FlowControl the moment it receives the message, buffers admitted
// messages (at most MaxMessages, or stage.DefaultBound when messages are
// unlimited) and hands them downstream on demand. While the budget is spent
// it does not receive, so the backpressure reaches the stream and, through
// the HTTP/2 window, the server. Outstanding() therefore counts every
// message received and not yet settled, however slow downstream is (a
// gate that counted on push would count only what downstream had taken).
//
// The same counting is also a receipt step (Receive), which a source runs
// where it decodes a response, and the Gate is then also the source's
// Budget (Open, Closed, Room, Wake): streams read only while there is room
// and ask the server only for the room that is left. That is how a
// Subscriber composes it.
//
// Permits are returned by the settle path (FlowControl.ReleaseMessage), not
// by the gate. A message settled while buffered (its lease expired, say) is
// dropped instead of emitted; a message settled before it was admitted never
// takes a permit. Permits released therefore always equal permits acquired.
//
// One Gate may run several times (several streams) on one FlowControl.
type Gate struct {
	// Flow is the budget. Required.
	Flow *FlowControl

	// OnDrop settles a message the gate still holds when it stops without
	// emitting it (cancellation or Discard). Nil means m.Nack(). The gate
	// releases the message's permits after OnDrop in any case.
	OnDrop func(m *message.Message)

	// Discard, if set, is closed to make the gate drop (OnDrop) what it
	// holds and what it receives from then on (graceful shutdown: messages
	// not yet handed to processing are nacked).
	Discard <-chan struct{}

	// HandOff, if set, is asked once for each message about to be offered
	// downstream, on the gate's goroutine: true offers it; false removes
	// it from the buffer without emitting it, HandOff having settled it
	// (for example with the shutdown outcome while a subscriber drains).
	// The gate releases a removed message's permits (idempotently) either
	// way. A subscriber marks messages handed to processing there, which
	// saves a stage (a goroutine and a hand-off per message) behind the
	// gate. It must not block.
	HandOff func(m *message.Message) bool

	// Pending, if set, reports the messages settled whose acks or nacks
	// the server has not confirmed yet (ack.Acknowledger's Stats().Unacked):
	// the server still counts them, so a new stream's grant leaves room
	// for them.
	Pending func() int64
}

// Receive is the gate's receipt step (source.Config.Receipt): it counts
// every message of a batch stream decoded as outstanding, at once.
func (gt *Gate) Receive(stream int, ms []*message.Message) { gt.Flow.Receive(stream, ms) }

// Open grants stream the limits for a new stream's initial request
// (source.Budget); see FlowControl.OpenLane.
func (gt *Gate) Open(stream int, shareMessages, shareBytes int64) (maxMessages, maxBytes int64, ok bool) {
	var pending int64
	if gt.Pending != nil {
		pending = gt.Pending()
	}
	return gt.Flow.OpenLane(stream, shareMessages, shareBytes, pending)
}

// Closed returns a stream's grant (source.Budget).
func (gt *Gate) Closed(stream int) { gt.Flow.CloseLane(stream) }

// Room reports whether the streams may read on (source.Budget): while
// fewer than MaxMessages messages are outstanding. Bytes are bounded by
// the grants instead: the service may send a stream one message larger
// than the room its grant left (alone), and a stream that stopped reading
// then would leave that message unread and unleased in the transport until
// its deadline passed — so it reads it, and counts it.
func (gt *Gate) Room() bool {
	fc := gt.Flow
	return fc.maxMessages <= 0 || fc.outstanding.Load() < fc.maxMessages
}

// Wake is closed when room may have changed (source.Budget).
func (gt *Gate) Wake() <-chan struct{} { return gt.Flow.Wake() }

// FlowGate returns a Gate on fc with the default OnDrop (nack).
func FlowGate(fc *FlowControl) stage.Flow[*message.Message, *message.Message] {
	return &Gate{Flow: fc}
}

// Run starts the gate's goroutine under g and returns its output.
func (gt *Gate) Run(g *stage.Group, in <-chan *message.Message) <-chan *message.Message {
	r := &gateRun{fc: gt.Flow, onDrop: gt.OnDrop, handOff: gt.HandOff}
	bound := stage.DefaultBound
	if m := gt.Flow.MaxMessages(); m > 0 {
		bound = int(m) // admitted messages never exceed it
	}
	e := &stage.Eager[*message.Message]{
		Bound:   bound,
		Room:    r.room,
		Admit:   r.admit,
		Wake:    r.wakeCh,
		Skip:    r.skip,
		Ready:   r.offer,
		OnDrop:  r.drop,
		Discard: gt.Discard,
		Observe: r.observe,
	}
	return e.Run(g, in)
}

// gateRun is one run's state; its methods run on the stage's goroutine only.
type gateRun struct {
	fc      *FlowControl
	onDrop  func(*message.Message)
	handOff func(*message.Message) bool
	asked   *message.Message // the head HandOff last accepted
	// wake was fetched before the last failed Room or Admit check, so a
	// release after that check closes it (no lost wake-up).
	wake    <-chan struct{}
	waiting *message.Message // counted in fc.waiting
	// offered is the head of the buffer once it has been offered
	// downstream; it does not count as buffered, so that the moment
	// downstream takes it (before the stage pops it) fc.buffered already
	// says whether more work is queued.
	offered *message.Message
	n       int   // buffer length at the last observe
	counted int64 // what this run added to fc.buffered
}

func (r *gateRun) room() bool {
	if r.fc.Room() {
		return true
	}
	r.wake = r.fc.Wake()
	return r.fc.Room()
}

func (r *gateRun) admit(m *message.Message) bool {
	if r.fc.AcquireMessage(m) {
		r.unwait(m)
		return true
	}
	if r.waiting != m {
		r.unwait(r.waiting)
		r.waiting = m
		r.fc.waiting.Add(1)
	}
	r.wake = r.fc.Wake()
	if r.fc.AcquireMessage(m) {
		r.unwait(m)
		return true
	}
	return false
}

func (r *gateRun) unwait(m *message.Message) {
	if m != nil && r.waiting == m {
		r.waiting = nil
		r.fc.waiting.Add(-1)
	}
}

func (r *gateRun) wakeCh() <-chan struct{} {
	if r.wake == nil {
		r.wake = r.fc.Wake()
	}
	return r.wake
}

// skip drops a buffered message that was settled meanwhile. Its settle path
// released its permits; releasing here too covers a message settled with
// no settle path bound (ReleaseMessage is idempotent).
//
// It also asks HandOff, once per head, whether m may be offered.
func (r *gateRun) skip(m *message.Message) bool {
	if !m.Settled() {
		if r.handOff == nil || r.asked == m {
			return false
		}
		if r.handOff(m) {
			r.asked = m
			return false
		}
	}
	r.fc.ReleaseMessage(m)
	return true
}

func (r *gateRun) drop(m *message.Message) {
	r.unwait(m)
	if r.onDrop != nil {
		r.onDrop(m)
	} else {
		m.Nack()
	}
	r.fc.ReleaseMessage(m)
}

// offer is the stage's Ready hook, used only to see the head being
// offered; it never holds emission back.
func (r *gateRun) offer(m *message.Message) <-chan struct{} {
	if m != r.offered {
		r.offered = m
		r.account()
	}
	return nil
}

func (r *gateRun) observe(n int) {
	if n < r.n {
		r.offered = nil // the head left the buffer (emitted, skipped or dropped)
	}
	r.n = n
	r.account()
}

// account keeps fc.buffered = Σ over runs of (buffered − offered head).
func (r *gateRun) account() {
	c := int64(r.n)
	if r.offered != nil {
		c--
	}
	if d := c - r.counted; d != 0 {
		r.counted = c
		r.fc.buffered.Add(d)
	}
}
