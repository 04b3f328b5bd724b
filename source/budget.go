package source

import (
	"context"
	"errors"
	"sync/atomic"
)

// laneIDs numbers the stream slots of every source in the process: a
// Budget shared by several sources tells their streams apart by it.
var laneIDs atomic.Int64

// errRevoked is a stream's end once a Budget revoked its grant: no
// failure, the stream opens again at once.
var errRevoked = errors.New("pubsubflow/source: flow-control grant revoked")

// grant returns the flow-control limits stream i's next stream asks for on
// lane: its share of the limits, or, with Budgets, the least they grant
// once every one grants room (a wait for room is no failure). Each Budget
// may call revoke. ok is false when ctx ended first.
func (s *Source) grant(ctx context.Context, i, lane int, revoke func()) (maxMsgs, maxBytes int64, ok bool) {
	msgs, bytes := share(s.cfg.MaxOutstandingMessages, i, s.cfg.Streams), share(s.cfg.MaxOutstandingBytes, i, s.cfg.Streams)
	for len(s.flows) > 0 {
		maxMsgs, maxBytes, wake := s.tryOpen(lane, msgs, bytes, revoke)
		if wake == nil {
			return maxMsgs, maxBytes, true
		}
		if !waitOn(ctx, wake, budgetRecheck) {
			return 0, 0, false
		}
	}
	return msgs, bytes, ctx.Err() == nil
}

// tryOpen asks each Budget in turn for the grant the ones before left;
// when one refuses, those that granted are told the lane closed, and wake
// is the refusing one's Wake. Every budget is told the least grant, so
// each holds its bound at the server.
func (s *Source) tryOpen(lane int, msgs, bytes int64, revoke func()) (maxMsgs, maxBytes int64, wake <-chan struct{}) {
	for i, b := range s.flows {
		w := b.Wake()
		m, by, ok := b.Open(lane, msgs, bytes, revoke)
		if !ok {
			for _, o := range s.flows[:i] {
				o.Closed(lane)
			}
			return 0, 0, w
		}
		msgs, bytes = least(msgs, m), least(bytes, by)
	}
	if len(s.flows) > 1 {
		for _, b := range s.flows {
			b.Open(lane, msgs, bytes, revoke) // lowers a grant above the least
		}
	}
	return msgs, bytes, nil
}

// least is the lesser of two limits where 0 means unlimited.
func least(a, b int64) int64 {
	if a <= 0 || b > 0 && b < a {
		return b
	}
	return a
}

// closeLane tells every Budget that lane's stream has ended (or that the
// source no longer asks to open it).
func (s *Source) closeLane(lane int) {
	for _, b := range s.flows {
		b.Closed(lane)
	}
}

// waitRoom waits until the stream on lane may read another response: every
// Budget has room, or without one the previous responses were handed on.
// false when ctx is done first.
func (s *Source) waitRoom(ctx context.Context, lane int, h *handoff) bool {
	if len(s.flows) == 0 {
		for ch := h.drained(); ch != nil; ch = h.drained() {
			if !waitOn(ctx, ch, -1) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(s.flows); {
		b := s.flows[i]
		wake := b.Wake()
		if b.Room(lane) {
			i++
			continue
		}
		if !waitOn(ctx, wake, budgetRecheck) {
			return false
		}
		i = 0 // another may have filled meanwhile
	}
	return true
}
