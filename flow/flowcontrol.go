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
// messages and MaxBytes bytes outstanding, from the moment a message is
// counted (on receipt) until it is settled, however that happens, so
// Outstanding is exact at every moment. One message larger than MaxBytes
// is admitted when no bytes are outstanding, so it cannot deadlock. A
// counted message gives its permit back through its own settle path:
// there is nothing to pair. All methods are safe for concurrent use; one
// FlowControl may back several gates, streams and subscriptions.
type FlowControl struct {
	maxMessages, maxBytes int64 // ≤ 0: unlimited
	tally
	acquired  atomic.Int64 // Released is acquired − held
	overGrant atomic.Int64
	_         [48]byte

	mu    sync.Mutex         // guards lanes, waiting and standalone admission
	lanes map[int]*laneCount // the open streams, by the source's lane number
	// waiting holds the lanes refused room to open, or revoked and not
	// open again, until they open or their source gives them up.
	waiting map[int]bool
	wake    broadcast.Wake // broadcast by every release and lane change
}

// tally is what a budget, or one stream of it, holds unsettled (held) and
// what the server may still count (server: until each ack or nack is
// final, so a new stream asks only for room the server has released).
// Settle paths and the acknowledger write the halves at once, so each
// sits on a cache line of its own.
type tally struct {
	_                   [64]byte
	held, heldBytes     atomic.Int64
	_                   [48]byte
	server, serverBytes atomic.Int64
	_                   [48]byte
}

func (t *tally) add(n, bytes int64) {
	t.held.Add(n)
	t.heldBytes.Add(bytes)
	t.server.Add(n)
	t.serverBytes.Add(bytes)
}

// Defaults of a Subscriber's budget (Google's clients' defaults).
const (
	DefaultMaxMessages = 1000
	DefaultMaxBytes    = 100 << 20
)

// Unlimited, as a limit, turns that dimension of a budget off; it is
// source.Unlimited.
const Unlimited = source.Unlimited

// NewFlowControl returns a budget of maxMessages messages and maxBytes
// bytes: 0 is the default (DefaultMaxMessages, DefaultMaxBytes), and any
// negative limit is Unlimited; an unlimited budget still counts.
func NewFlowControl(maxMessages, maxBytes int64) *FlowControl {
	return &FlowControl{
		maxMessages: limitOf(maxMessages, DefaultMaxMessages),
		maxBytes:    limitOf(maxBytes, DefaultMaxBytes),
		lanes:       map[int]*laneCount{},
		waiting:     map[int]bool{},
	}
}

func limitOf(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return Unlimited
	}
	return v
}

// MaxMessages is the message limit (Unlimited: none).
func (fc *FlowControl) MaxMessages() int64 { return fc.maxMessages }

// MaxBytes is the byte limit (Unlimited: none).
func (fc *FlowControl) MaxBytes() int64 { return fc.maxBytes }

// tryAcquire counts one message of size bytes if the budget has room for
// it (a standalone gate's admission), under mu so that two gates cannot
// both take the last permit.
func (fc *FlowControl) tryAcquire(size int) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	b, sz := fc.heldBytes.Load(), int64(max(size, 0))
	if fc.maxMessages > 0 && fc.held.Load() >= fc.maxMessages || fc.maxBytes > 0 && b > 0 && b+sz > fc.maxBytes {
		return false
	}
	fc.add(1, sz)
	fc.acquired.Add(1)
	return true
}

// Room reports whether another message could be admitted now: fewer than
// MaxMessages messages and fewer than MaxBytes bytes outstanding.
func (fc *FlowControl) Room() bool {
	return (fc.maxMessages <= 0 || fc.held.Load() < fc.maxMessages) &&
		(fc.maxBytes <= 0 || fc.heldBytes.Load() < fc.maxBytes)
}

// Wake returns a channel closed at the next release or lane change. To
// wait without missing one, fetch Wake first, then check Room, then wait.
func (fc *FlowControl) Wake() <-chan struct{} { return fc.wake.Wait() }

// Outstanding is the number of messages holding permits now.
func (fc *FlowControl) Outstanding() int64 { return fc.held.Load() }

// OutstandingBytes is the bytes of the messages holding permits now.
func (fc *FlowControl) OutstandingBytes() int64 { return fc.heldBytes.Load() }

// Stats is a snapshot of a FlowControl's counters.
type Stats struct {
	Outstanding      int64
	OutstandingBytes int64
	// ServerHeld adds to Outstanding the settled messages whose ack or
	// nack is not final yet: what the server may still count.
	ServerHeld int64
	// Acquired − Released == Outstanding.
	Acquired int64
	Released int64
	// OverGrant counts messages a server sent a stream past the grant its
	// initial request asked for (at most one response per stream is read).
	OverGrant int64
}

// Stats returns the counters (each read atomically, not all at one instant).
func (fc *FlowControl) Stats() Stats {
	acquired := fc.acquired.Load() // first: a permit counted after it is in neither figure
	out := fc.held.Load()
	return Stats{
		Outstanding:      out,
		OutstandingBytes: fc.heldBytes.Load(),
		ServerHeld:       fc.server.Load(),
		Acquired:         acquired,
		Released:         acquired - out,
		OverGrant:        fc.overGrant.Load(),
	}
}

// permit is what one message holds of a FlowControl, and of its key in a
// keyed gate; as the message's Holder, its settle path gives it back.
type permit struct {
	node message.HoldNode
	fc   *FlowControl // nil: a fused keyed gate's, which counts only the key
	size int64
	lane *laneCount // nil: standalone, or a lane the budget did not open
	key  *keyState
}

// Settled returns the client's permit: counters first, wake last, so
// whoever fetched Wake before is woken and whoever fetches it after sees
// the room.
func (p *permit) Settled(any, uint32) {
	if p.key != nil {
		p.key.release()
	}
	if p.fc == nil {
		return
	}
	if p.lane != nil {
		p.lane.heldBytes.Add(-p.size)
		p.lane.held.Add(-1)
	}
	p.fc.heldBytes.Add(-p.size)
	p.fc.held.Add(-1)
	p.fc.wake.Broadcast()
}

// Done returns what the server counted, once the ack or nack is final.
func (p *permit) Done(any, time.Time) {
	if p.fc == nil {
		return
	}
	p.fc.serverBytes.Add(-p.size)
	p.fc.server.Add(-1)
	if p.lane != nil {
		p.lane.serverBytes.Add(-p.size)
		p.lane.server.Add(-1)
	}
	p.fc.wake.Broadcast()
}

// laneBudget is a FlowControl as its streams see it (source.Budget).
type laneBudget struct{ *FlowControl }

// laneCount is one stream's part of its budget, against its grant (0:
// unlimited). A stream's end drops its lane, so permits of an earlier
// stream no longer touch a new one.
type laneCount struct {
	tally
	grantMsgs, grantBytes int64       // set under mu before the stream opens
	warned                atomic.Bool // its over-grant was logged
	revoke                func()      // asks the stream to end (nil: it cannot be asked)
	revoked               bool        // under mu
}

// over reports whether a message received now is past the lane's grant.
// Only unsettled messages count: the server may release one (an ack it
// applied) before the client hears that it did, and send the next.
func (c *laneCount) over(msgs, bytes int64) bool {
	return (c.grantMsgs > 0 && msgs >= c.grantMsgs) || (c.grantBytes > 0 && bytes >= c.grantBytes)
}

func (fc *FlowControl) lane(lane int) *laneCount {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.lanes[lane]
}

// Room lets the stream on lane read on while the budget has room, or while
// the lane holds less than its grant unsettled: the server counts what it
// sent within the grant already, and unread it would be leased by no one.
func (b laneBudget) Room(lane int) bool {
	if b.FlowControl.Room() {
		return true
	}
	c := b.lane(lane)
	return c != nil && !c.over(c.held.Load(), c.heldBytes.Load())
}

// receive is FlowGate's receipt step: it counts at once every message of a
// batch a stream on lane just decoded, refusing none (they are in the
// client's hands) but skipping those settled already. What a server sent
// past the lane's grant is counted and returned as over; first is true
// the first time the lane went over.
func (fc *FlowControl) receive(lane int, ms []*source.Message) (over int64, first bool) {
	lc := fc.lane(lane)
	slab := make([]permit, len(ms))
	var n, bytes, held, heldBytes int64
	if lc != nil {
		held, heldBytes = lc.held.Load(), lc.heldBytes.Load()
	}
	now := time.Now()
	for i, m := range ms {
		if message.Of(m).ExpireIfLate(m, now) {
			continue
		}
		p := &slab[i]
		p.fc, p.size, p.lane = fc, int64(max(m.Size(), 0)), lc
		if lc != nil && lc.over(held+n, heldBytes+bytes) {
			over++
		}
		n++
		bytes += p.size
	}
	if n == 0 {
		return 0, false
	}
	fc.add(n, bytes) // before any Hold: one settled meanwhile gives its permit back at once
	fc.acquired.Add(n)
	if lc != nil {
		lc.add(n, bytes)
	}
	for i, m := range ms {
		if p := &slab[i]; p.fc != nil {
			message.Of(m).Hold(m, &p.node, p)
		}
	}
	if over == 0 {
		return 0, false
	}
	fc.overGrant.Add(over)
	return over, !lc.warned.Swap(true)
}

// Open grants a stream on lane its share cut down to the room the server
// has released: the limit, minus what the server may still count, minus
// what the other open lanes may still be sent under their grants, so the
// server never sees more than the budget however many streams share it.
// It waits until half the share is free, so that a reconnect is not left
// a tiny grant for life. While other lanes wait, the share is cut to the
// fair share of the open and waiting lanes.
func (b laneBudget) Open(lane int, shareMsgs, shareBytes int64, revoke func()) (msgs, bytes int64, ok bool) {
	fc := b.FlowControl
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if c := fc.lanes[lane]; c != nil {
		c.grantMsgs, c.grantBytes = least(c.grantMsgs, shareMsgs), least(c.grantBytes, shareBytes)
		return c.grantMsgs, c.grantBytes, true
	}
	others := len(fc.waiting)
	if fc.waiting[lane] {
		others--
	}
	n := int64(len(fc.lanes) + others + 1)
	fairMsgs, fairBytes := fair(fc.maxMessages, n), fair(fc.maxBytes, n)
	if others > 0 {
		shareMsgs, shareBytes = least(shareMsgs, fairMsgs), least(shareBytes, fairBytes)
	}
	var otherMsgs, otherBytes int64
	for _, c := range fc.lanes {
		otherMsgs += unused(c.grantMsgs, c.server.Load(), fc.maxMessages)
		otherBytes += unused(c.grantBytes, c.serverBytes.Load(), fc.maxBytes)
	}
	msgs, okM := grant(fc.maxMessages, shareMsgs, fairMsgs, fc.server.Load()+otherMsgs)
	bytes, okB := grant(fc.maxBytes, shareBytes, fairBytes, fc.serverBytes.Load()+otherBytes)
	if !okM || !okB {
		fc.wait(lane)
		return 0, 0, false
	}
	delete(fc.waiting, lane)
	fc.lanes[lane] = &laneCount{grantMsgs: msgs, grantBytes: bytes, revoke: revoke}
	return msgs, bytes, true
}

// wait records that lane waits to open, and revokes every open lane
// granted more than the fair share of the open and waiting lanes: its
// stream ends and opens again with no more than that share.
func (fc *FlowControl) wait(lane int) {
	fc.waiting[lane] = true
	n := int64(len(fc.lanes) + len(fc.waiting))
	fairMsgs, fairBytes := fair(fc.maxMessages, n), fair(fc.maxBytes, n)
	for _, c := range fc.lanes {
		if !c.revoked && c.revoke != nil && (above(c.grantMsgs, fairMsgs) || above(c.grantBytes, fairBytes)) {
			c.revoked = true
			c.revoke()
		}
	}
}

// Closed returns what lane's stream was granted (its messages stay
// counted) and wakes the waiters. A revoked lane goes on waiting (its
// source opens it again); a lane not open stops waiting.
func (b laneBudget) Closed(lane int) {
	fc := b.FlowControl
	fc.mu.Lock()
	if c := fc.lanes[lane]; c != nil && c.revoked {
		fc.waiting[lane] = true
	} else {
		delete(fc.waiting, lane)
	}
	delete(fc.lanes, lane)
	fc.mu.Unlock()
	fc.wake.Broadcast()
}

// fair is the fair share of a limit among n lanes (0: unlimited), rounded
// up: a source that gives one of its streams the remainder is not above it.
func fair(limit, n int64) int64 {
	if limit <= 0 {
		return 0
	}
	return (limit + n - 1) / n
}

func above(granted, fair int64) bool { return fair > 0 && (granted <= 0 || granted > fair) }

// least is the lesser of two limits where 0 means unlimited.
func least(a, b int64) int64 {
	if a <= 0 || b > 0 && b < a {
		return b
	}
	return a
}

// unused is what an open lane may still be sent: its grant (the whole
// limit when unlimited) minus what the server counts of it.
func unused(granted, held, limit int64) int64 {
	if granted == 0 {
		granted = limit
	}
	return max(granted-held, 0)
}

// grant is a new lane's grant in one dimension: the share (the limit when
// the share is unlimited or larger) cut to the room left, and whether at
// least half the share, or of the fair share when that is less, is free.
func grant(limit, share, fairShare, used int64) (int64, bool) {
	if limit <= 0 {
		return share, true
	}
	if share <= 0 || share > limit {
		share = limit
	}
	room := limit - used
	if room <= 0 || room < (min(share, fairShare)+1)/2 {
		return 0, false
	}
	return min(share, room), true
}
