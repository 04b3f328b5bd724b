package flow

import (
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

// laneCount is what one stream delivered and the server may still count
// (msgs, bytes: until each release is final, for the grants), and what it
// certainly still counts (held, heldBytes: not settled yet, for telling
// an over-grant), against the grant its initial request asked for (0:
// unlimited; written under FlowControl.mu, before the stream opens). A
// stream's end drops it from the budget's lanes, so permits of an earlier
// stream, which count against the one they were received on, no longer
// touch a new one.
type laneCount struct {
	msgs, bytes           atomic.Int64
	held, heldBytes       atomic.Int64
	grantMsgs, grantBytes int64
	warned                atomic.Bool // its over-grant was logged
	// revoke asks the lane's stream to end, so that its grant can be
	// shared (nil: it cannot be asked); revoked is set when it was (both
	// under FlowControl.mu).
	revoke  func()
	revoked bool
}

// over reports whether a message received now on the lane is past its
// grant: the lane already holds its grant of unsettled messages or bytes
// (one message may take the bytes past the grant, as the service allows).
// Settled messages do not count: the server may release one (an ack it
// applied) before the client hears that it did, and send the next.
func (c *laneCount) over(msgs, bytes int64) bool {
	return (c.grantMsgs > 0 && msgs >= c.grantMsgs) || (c.grantBytes > 0 && bytes >= c.grantBytes)
}

// laneRoom reports whether lane's stream holds less than its grant
// unsettled: what a server keeping to the grant sends it fits.
func (fc *FlowControl) laneRoom(lane int) bool {
	c := fc.lane(lane)
	return c != nil && !c.over(c.held.Load(), c.heldBytes.Load())
}

// lane is the open lane numbered lane, or nil.
func (fc *FlowControl) lane(lane int) *laneCount {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.lanes[lane]
}

// add counts n messages of bytes just received on the lane.
func (c *laneCount) add(n, bytes int64) {
	c.msgs.Add(n)
	c.bytes.Add(bytes)
	c.held.Add(n)
	c.heldBytes.Add(bytes)
}

// settled takes one message of size off what the lane certainly holds.
func (c *laneCount) settled(size int64) {
	c.heldBytes.Add(-size)
	c.held.Add(-1)
}

// release takes one message of size off what the server may count.
func (c *laneCount) release(size int64) {
	c.bytes.Add(-size)
	c.msgs.Add(-1)
}

// receive is FlowGate's receipt step: it counts every message of a batch
// that a stream on lane just decoded as outstanding, at once and without
// refusing any — they are already in the client's hands, and a count
// that left some out would under-report what the client holds. Each
// message's settle path gives its permit back. It never blocks; a message
// already settled is skipped. The counters move once for the batch, then
// each message takes its permit record (one slab for the batch).
//
// The stream stops reading while Room is false, and it asked the server
// only for what openLane granted, so the count stays within the limits
// whenever the server keeps to the grant (it may exceed MaxBytes by one
// message when a single message is larger than the room left). What a
// server sends past a lane's grant is counted (OverGrant) and returned as
// over; first is true the first time that lane's stream went over.
func (fc *FlowControl) receive(lane int, ms []*source.Message) (over int64, first bool) {
	lc := fc.lane(lane) // nil: a lane this budget did not open counts nothing
	slab := make([]permit, len(ms))
	var n, bytes, held, heldBytes int64
	if lc != nil {
		held, heldBytes = lc.held.Load(), lc.heldBytes.Load()
	}
	now := time.Now() // one clock read for the batch
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
	fc.count(n, bytes)
	if lc != nil {
		lc.add(n, bytes)
	}
	for i, m := range ms {
		if p := &slab[i]; p.fc != nil {
			p.hold(m) // settled meanwhile: returned at once
		}
	}
	if over == 0 {
		return 0, false
	}
	fc.overGrant.Add(over)
	return over, !lc.warned.Swap(true)
}

// openLane is asked before a stream opens on lane (a number the source
// drew for one stream slot, unique in the process): it returns the
// flow-control limits the stream's initial request may ask the server
// for (0 in a dimension: unlimited on the wire), or ok false when there
// is not enough room to open a stream now; the caller then waits for Wake
// and asks again. Asked again for a lane already open, it lowers that
// lane's grant to the share (a source whose stream asks for less, the
// least grant of several budgets) and succeeds.
//
// share is the stream's share of the limits (0: unlimited). The grant is
// the share cut down to the room the server has released: the limit,
// minus every message it may still count (held, or settled with an ack or
// nack not final yet), minus what the other open lanes may still be sent
// under their grants. The server never sees more than the budget, however
// many streams, runs and reconnects share it. A stream opens only once at
// least half its share is free, so a reconnect while messages are held
// does not leave it a tiny grant for its whole life.
//
// The budget is shared fairly: while other lanes wait to open, the share
// is cut to the fair share (the limit over the open and waiting lanes),
// and a lane refused makes every open lane granted more than the fair
// share revoked (see wait).
func (fc *FlowControl) openLane(lane int, shareMsgs, shareBytes int64, revoke func()) (msgs, bytes int64, ok bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if c := fc.lanes[lane]; c != nil {
		c.grantMsgs, c.grantBytes = least(c.grantMsgs, shareMsgs), least(c.grantBytes, shareBytes)
		return c.grantMsgs, c.grantBytes, true
	}
	_, self := fc.waiting[lane]
	others := len(fc.waiting) - b2i(self)
	n := int64(len(fc.lanes) + others + 1)
	fairMsgs, fairBytes := fair(fc.maxMessages, n), fair(fc.maxBytes, n)
	if others > 0 {
		shareMsgs, shareBytes = least(shareMsgs, fairMsgs), least(shareBytes, fairBytes)
	}
	var otherMsgs, otherBytes int64 // what other open lanes may still be sent
	for _, c := range fc.lanes {
		otherMsgs += unused(c.grantMsgs, c.msgs.Load(), fc.maxMessages)
		otherBytes += unused(c.grantBytes, c.bytes.Load(), fc.maxBytes)
	}
	msgs, okM := grant(fc.maxMessages, shareMsgs, fairMsgs, fc.serverHeld.Load()+otherMsgs)
	bytes, okB := grant(fc.maxBytes, shareBytes, fairBytes, fc.serverHeldBytes.Load()+otherBytes)
	if !okM || !okB {
		fc.wait(lane)
		return 0, 0, false
	}
	delete(fc.waiting, lane)
	if fc.lanes == nil {
		fc.lanes = map[int]*laneCount{}
	}
	fc.lanes[lane] = &laneCount{grantMsgs: msgs, grantBytes: bytes, revoke: revoke}
	return msgs, bytes, true
}

// wait records that lane waits to open (under mu), and revokes every open
// lane granted more than the fair share of the open and waiting lanes:
// its stream ends (the source half-closes it, reads what the server still
// sends, and opens it again), and the lane waits to open again with a
// share no larger than the fair one. Its messages stay counted until
// the server releases them, so the room goes to whichever lane asks once
// there is enough of it.
func (fc *FlowControl) wait(lane int) {
	if fc.waiting == nil {
		fc.waiting = map[int]struct{}{}
	}
	fc.waiting[lane] = struct{}{}
	n := int64(len(fc.lanes) + len(fc.waiting))
	fairMsgs, fairBytes := fair(fc.maxMessages, n), fair(fc.maxBytes, n)
	for _, c := range fc.lanes {
		if !c.revoked && c.revoke != nil && (above(c.grantMsgs, fairMsgs) || above(c.grantBytes, fairBytes)) {
			c.revoked = true
			c.revoke()
		}
	}
}

// closeLane records that lane's stream has ended: what it was granted
// returns to the budget (its messages stay counted, now against no
// stream), and waiters on Wake are woken. A revoked lane goes on waiting
// (its source opens it again); a lane not open stops waiting (its source
// has given it up).
func (fc *FlowControl) closeLane(lane int) {
	fc.mu.Lock()
	if c := fc.lanes[lane]; c != nil && c.revoked {
		fc.waiting[lane] = struct{}{}
	} else {
		delete(fc.waiting, lane)
	}
	delete(fc.lanes, lane)
	fc.mu.Unlock()
	fc.broadcast()
}

// fair is the fair share of a limit among n lanes (0: unlimited),
// rounded up: a source that splits its share among its streams, and so
// gives one of them the remainder, is not above it.
func fair(limit, n int64) int64 {
	if limit <= 0 {
		return 0
	}
	return (limit + n - 1) / n
}

// above reports whether a grant exceeds the fair share (0: unlimited).
func above(granted, fair int64) bool { return fair > 0 && (granted <= 0 || granted > fair) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// least is the lesser of two limits where 0 means unlimited.
func least(a, b int64) int64 {
	if a <= 0 || b > 0 && b < a {
		return b
	}
	return a
}

// unused is what an open lane may still be sent: its grant minus what it
// holds (a lane granted "unlimited" may take the whole limit).
func unused(granted, held, limit int64) int64 {
	if granted == 0 {
		granted = limit
	}
	return max(granted-held, 0)
}

// grant is a new lane's grant in one dimension: the share (or the limit,
// when the share is unlimited) cut to the room left, and whether at least
// half the share, or of the fair share when that is less, is free (a lane
// beside others that hold the rest is not kept waiting for half the
// whole limit). An unlimited dimension grants the share.
func grant(limit, shareOf, fairShare, used int64) (int64, bool) {
	if limit <= 0 {
		return shareOf, true
	}
	share := share(limit, shareOf)
	room := limit - used
	if room <= 0 || room < (min(share, fairShare)+1)/2 {
		return 0, false
	}
	return min(share, room), true
}

// share is a stream's share of a limited dimension: shareOf, or the whole
// limit when shareOf is unlimited or larger.
func share(limit, shareOf int64) int64 {
	if limit > 0 && (shareOf <= 0 || shareOf > limit) {
		return limit
	}
	return shareOf
}

// acquireOne counts m (a standalone gate's admission) if the budget has
// room now; ok also when m is settled already (it then holds nothing).
func (fc *FlowControl) acquireOne(m *source.Message) bool {
	if expireIfLate(m) {
		return true
	}
	size := int64(max(m.Size(), 0))
	if !fc.tryAcquire(int(size)) {
		return false
	}
	p := &permit{fc: fc, size: size}
	p.hold(m)
	return true
}

var _ message.Holder = (*permit)(nil)

// expireIfLate reports whether m is settled, expiring it first if its lease
// has lapsed: a gate hands on no copy the server may have given out again.
func expireIfLate(m *source.Message) bool { return message.Of(m).ExpireIfLateNow(m) }
