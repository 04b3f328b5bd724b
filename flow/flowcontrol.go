package flow

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/broadcast"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

// FlowControl is a client-side flow-control budget: at most MaxMessages
// messages and MaxBytes bytes outstanding, where a message is outstanding
// from the moment it is counted (on receipt) until it is settled (ack,
// nack, no-op, expiry, shutdown). Outstanding and OutstandingBytes are
// exact at every moment. One message larger than MaxBytes is admitted
// when no bytes are outstanding, so an oversize message cannot deadlock.
//
// A message counted by a FlowControl gives its permit back through its
// own settle path, whatever ends it: there is nothing to pair. The budget
// also remembers what the server still counts (a settled message until
// its ack or nack is final), so a stream opened meanwhile asks the server
// only for room it has really released (see FlowControl.openLane).
//
// All methods are safe for concurrent use; one FlowControl may be shared
// by several gates, streams and subscriptions.
type FlowControl struct {
	maxMessages int64 // 0: unlimited
	maxBytes    int64 // 0: unlimited

	// The counters a message's settling moves, those its ack's
	// finality moves and the one only receipt moves sit on cache lines
	// of their own: different goroutines (handlers, the acknowledger, the
	// streams) write them, per message, at once.
	_                [64]byte
	outstanding      atomic.Int64
	outstandingBytes atomic.Int64
	_                [48]byte
	// serverHeld counts messages received whose release the server has not
	// seen yet: outstanding ones, and settled ones whose ack or nack is
	// not final.
	serverHeld      atomic.Int64
	serverHeldBytes atomic.Int64
	_               [48]byte
	acquired        atomic.Int64 // Released is acquired − outstanding
	overGrant       atomic.Int64 // messages a server sent past a stream's grant
	_               [56]byte

	mu    sync.Mutex         // guards lanes and waiting
	lanes map[int]*laneCount // the open streams' lanes, by the source's lane number
	// waiting holds the lanes refused room to open (or revoked and not
	// open again yet), until they open or their source gives them up.
	waiting map[int]struct{}

	// wake is broadcast by every release and lane change.
	wake broadcast.Wake
}

// Defaults of a Subscriber's budget (Google's clients' defaults).
const (
	DefaultMaxMessages = 1000
	DefaultMaxBytes    = 100 << 20
)

// Unlimited, as a limit, turns that dimension of a budget off (and as
// ExtenderConfig.MaxExtension, the bound); it is source.Unlimited, the
// module's one "no limit".
const Unlimited = source.Unlimited

// NewFlowControl returns a budget of maxMessages messages and maxBytes
// bytes: 0 is the default (DefaultMaxMessages, DefaultMaxBytes), Unlimited
// turns that dimension off; an unlimited budget still counts. It cannot
// fail, so it reads any other negative limit as Unlimited; the configs
// that feed it (SubscriberConfig, source.Config) refuse those.
func NewFlowControl(maxMessages, maxBytes int64) *FlowControl {
	return &FlowControl{maxMessages: limitOf(maxMessages, DefaultMaxMessages), maxBytes: limitOf(maxBytes, DefaultMaxBytes)}
}

// limitOf is the internal form of a limit: 0 for none.
func limitOf(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// MaxMessages is the message limit (Unlimited: none).
func (fc *FlowControl) MaxMessages() int64 { return external(fc.maxMessages) }

// MaxBytes is the byte limit (Unlimited: none).
func (fc *FlowControl) MaxBytes() int64 { return external(fc.maxBytes) }

// external is a limit as the API spells it.
func external(v int64) int64 {
	if v == 0 {
		return Unlimited
	}
	return v
}

// tryAcquire takes the permits of one message of size bytes if the budget
// allows it now, without waiting, and reports whether it did (a
// standalone gate's admission; the permit's settle path returns it). A
// message larger than MaxBytes is admitted only when no bytes are
// outstanding.
func (fc *FlowControl) tryAcquire(size int) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.tryAcquireLocked(int64(max(size, 0)))
}

func (fc *FlowControl) tryAcquireLocked(size int64) bool {
	n, b := fc.outstanding.Load(), fc.outstandingBytes.Load()
	if fc.maxMessages > 0 && n >= fc.maxMessages {
		return false
	}
	if fc.maxBytes > 0 && b > 0 && b+size > fc.maxBytes {
		return false // an oversize message goes only when no bytes are out
	}
	fc.count(1, size)
	return true
}

// count takes n messages of bytes into the count (one step for a batch).
func (fc *FlowControl) count(n, bytes int64) {
	fc.outstanding.Add(n)
	fc.outstandingBytes.Add(bytes)
	fc.serverHeld.Add(n)
	fc.serverHeldBytes.Add(bytes)
	fc.acquired.Add(n)
}

// settle takes n messages of bytes out of the client's count, and wakes
// whoever waits on Wake. Counters first, wake last: whoever fetched Wake
// before is woken, whoever fetches it after sees the room.
func (fc *FlowControl) settle(n, bytes int64) {
	fc.outstandingBytes.Add(-bytes)
	fc.outstanding.Add(-n)
	fc.broadcast()
}

func (fc *FlowControl) broadcast() { fc.wake.Broadcast() }

// Room reports whether another message could be admitted now: fewer than
// MaxMessages messages and fewer than MaxBytes bytes outstanding.
func (fc *FlowControl) Room() bool {
	if fc.maxMessages > 0 && fc.outstanding.Load() >= fc.maxMessages {
		return false
	}
	if fc.maxBytes > 0 && fc.outstandingBytes.Load() >= fc.maxBytes {
		return false
	}
	return true
}

// Wake returns a channel closed at the next release or lane change (a
// broadcast). To wait without missing one, fetch Wake first, then check
// Room, then wait.
func (fc *FlowControl) Wake() <-chan struct{} { return fc.wake.Wait() }

// Outstanding is the number of messages holding permits now.
func (fc *FlowControl) Outstanding() int64 { return fc.outstanding.Load() }

// OutstandingBytes is the bytes of the messages holding permits now (their
// full sizes: above MaxBytes only while one oversize message is alone).
func (fc *FlowControl) OutstandingBytes() int64 { return fc.outstandingBytes.Load() }

// Stats is a snapshot of a FlowControl's counters.
type Stats struct {
	Outstanding      int64
	OutstandingBytes int64
	// ServerHeld counts messages the server may still count against the
	// subscription: the outstanding ones, and settled ones whose ack or
	// nack is not final yet.
	ServerHeld int64
	// Acquired and Released count permits ever taken and returned;
	// Acquired − Released == Outstanding.
	Acquired int64
	Released int64
	// OverGrant counts messages a server sent a stream past the grant its
	// initial request asked for (a server that ignores flow control). The
	// streams stop reading on the budget, so what goes over is bounded by
	// one response per stream.
	OverGrant int64
}

// Stats returns the counters (each read atomically, not all at one instant).
func (fc *FlowControl) Stats() Stats {
	// Acquired first: a permit counted after it is in neither figure
	// (Released is derived, so the pair is consistent).
	acquired := fc.acquired.Load()
	out := fc.outstanding.Load()
	return Stats{
		Outstanding:      out,
		OutstandingBytes: fc.outstandingBytes.Load(),
		ServerHeld:       fc.serverHeld.Load(),
		Acquired:         acquired,
		Released:         acquired - out,
		OverGrant:        fc.overGrant.Load(),
	}
}

// permit is what one message holds from a FlowControl; it is the
// message's Holder, so its settle path gives it back.
type permit struct {
	node message.HoldNode
	fc   *FlowControl
	size int64
	// lane counts what the stream the message came on holds (nil for a
	// standalone gate's permit, or a lane this budget did not open).
	lane *laneCount
}

// Settled returns the client's permit (the message is no longer held).
func (p *permit) Settled(any, uint32) {
	if p.lane != nil {
		p.lane.settled(p.size)
	}
	p.fc.settle(1, p.size)
}

// Done returns what the server counted: the lane's share and the room a
// new stream may be granted.
func (p *permit) Done(any, time.Time) {
	p.fc.serverHeldBytes.Add(-p.size)
	p.fc.serverHeld.Add(-1)
	if p.lane != nil {
		p.lane.release(p.size)
	}
	p.fc.broadcast()
}

// hold attaches p to m (counted already).
func (p *permit) hold(m *source.Message) {
	message.Of(m).Hold(m, &p.node, p)
}
