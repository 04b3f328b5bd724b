package flow

import "github.com/pubsubflow/pubsubflow/internal/message"

// noLane marks a permit taken by a standalone gate, not by a stream's
// receipt step.
const noLane = -1

// permit is what one message holds: its bytes, and the stream (lane) whose
// server-side budget it counts against.
type permit struct {
	size int64
	lane int
	gen  uint32 // the lane's generation (stream) it was received on
}

// lane is one stream's share of the budget as the server sees it: the
// limits its initial request asked for (grant), and how many of the
// messages it delivered are still held.
type lane struct {
	open                  bool
	gen                   uint32 // bumped when its stream ends
	grantMsgs, grantBytes int64  // 0: that dimension unlimited on the wire
	heldMsgs, heldBytes   int64
}

// Receive is FlowGate's receipt step: it counts every message of a batch
// that stream (lane) just decoded as outstanding, at once and without
// refusing any — they are already in the client's hands, and a count that
// left some out would under-report what the client holds. It never
// blocks. A message already settled (or already counted) is skipped.
//
// The stream stops reading while Room is false, and it asked the server
// only for what OpenLane granted, so the count stays within the limits
// whenever the server keeps to the grant (it may exceed MaxBytes by one
// message when a single message is larger than the room left).
func (fc *FlowControl) Receive(stream int, ms []*message.Message) {
	fc.mu.Lock()
	l := fc.laneLocked(stream)
	for _, m := range ms {
		if m.Settled() {
			continue // its settle path ran before it was counted: nothing to release
		}
		if _, ok := fc.held[m]; ok {
			continue
		}
		size := int64(max(m.Size(), 0))
		fc.held[m] = permit{size: size, lane: stream, gen: l.gen}
		fc.countLocked(size)
		l.heldMsgs++
		l.heldBytes += size
	}
	fc.mu.Unlock()
}

// OpenLane is asked before stream opens a StreamingPull stream: it returns
// the flow-control limits the stream's initial request may ask the server
// for (0 in a dimension means unlimited on the wire), or ok false when
// there is not enough room to open a stream now; the caller then waits for
// Wake and asks again.
//
// share is the stream's share of the limits (the limits divided among the
// streams; 0 means unlimited). The grant is the share, cut down to the room
// that is left: the limit minus the messages (and bytes) outstanding, minus
// pending (messages settled whose acks or nacks the server has not
// confirmed yet, which it still counts), minus what the other open streams
// may still be sent under their own grants. The server never sees more
// than the budget, however often streams reconnect. A stream is opened
// only once at least half its share is free, so that a reconnect while
// messages are held does not leave a stream with a tiny grant for its whole
// life.
//
// One gap remains: a message settled with NoOp or NackAfter, or dropped
// past its maximum extension, leaves the client's count at once, while the
// server counts it until its deadline passes; a stream opened meanwhile may
// be granted that room. Acks and immediate nacks are covered by pending.
func (fc *FlowControl) OpenLane(stream int, shareMsgs, shareBytes, pending int64) (msgs, bytes int64, ok bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var otherMsgs, otherBytes int64 // what other open lanes may still be sent
	for i := range fc.lanes {
		l := &fc.lanes[i]
		if i == stream || !l.open {
			continue
		}
		otherMsgs += unused(l.grantMsgs, l.heldMsgs, fc.maxMessages)
		otherBytes += unused(l.grantBytes, l.heldBytes, fc.maxBytes)
	}
	msgs, okM := grant(fc.maxMessages, shareMsgs, fc.outstanding.Load()+pending+otherMsgs)
	bytes, okB := grant(fc.maxBytes, shareBytes, fc.outstandingBytes.Load()+otherBytes)
	if !okM || !okB {
		return 0, 0, false
	}
	l := fc.laneLocked(stream)
	l.open, l.grantMsgs, l.grantBytes = true, msgs, bytes
	return msgs, bytes, true
}

// CloseLane records that stream's stream has ended: what it was granted
// returns to the budget (its held messages stay outstanding, now counted
// against no stream), and waiters on Wake are woken.
func (fc *FlowControl) CloseLane(stream int) {
	fc.mu.Lock()
	l := fc.laneLocked(stream)
	*l = lane{gen: l.gen + 1}
	fc.mu.Unlock()
	fc.broadcast()
}

func (fc *FlowControl) laneLocked(stream int) *lane {
	for len(fc.lanes) <= stream {
		fc.lanes = append(fc.lanes, lane{})
	}
	return &fc.lanes[stream]
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
// half the share is free. An unlimited dimension grants the share.
func grant(limit, shareOf, used int64) (int64, bool) {
	if limit <= 0 {
		return shareOf, true
	}
	share := share(limit, shareOf)
	room := limit - used
	if room <= 0 || room < (share+1)/2 {
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
