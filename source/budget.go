package source

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// laneIDs numbers the stream slots of every source in the process: a
// Budget shared by several sources tells their streams apart by it.
var laneIDs atomic.Int64

// errRevoked is a stream's end once a Budget revoked its grant: no
// failure, the stream opens again at once.
var errRevoked = errors.New("pubsubflow/source: flow-control grant revoked")

// revocation is one stream's revoke signal, which its Budgets may fire.
type revocation struct {
	once sync.Once
	ch   chan struct{} // closed when fired
}

func newRevocation() *revocation { return &revocation{ch: make(chan struct{})} }

func (r *revocation) fire() { r.once.Do(func() { close(r.ch) }) }

func (r *revocation) fired() bool {
	select {
	case <-r.ch:
		return true
	default:
		return false
	}
}

// openLane waits until every Budget grants a new stream on lane room, or
// ctx is done (ok false). The stream asks the server for the least of the
// grants, and every budget is told so: each holds its bound at the server.
func (s *Source) openLane(ctx context.Context, lane int, shareMsgs, shareBytes int64, rv *revocation) (maxMsgs, maxBytes int64, ok bool) {
	for {
		maxMsgs, maxBytes, wake := s.tryOpen(lane, shareMsgs, shareBytes, rv)
		if wake == nil {
			return maxMsgs, maxBytes, true
		}
		if !waitOn(ctx, wake, budgetRecheck) {
			return 0, 0, false
		}
	}
}

// tryOpen asks each Budget in turn for the grant the ones before left;
// when one refuses, those that granted are told the lane closed, and wake
// is the refusing one's Wake.
func (s *Source) tryOpen(lane int, msgs, bytes int64, rv *revocation) (maxMsgs, maxBytes int64, wake <-chan struct{}) {
	for i, b := range s.flows {
		w := b.Wake()
		m, by, ok := b.Open(lane, msgs, bytes, rv.fire)
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
			b.Open(lane, msgs, bytes, rv.fire) // lowers a grant above the least
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

// waitBudgets waits until every Budget lets the stream on lane read on;
// false when ctx is done first.
func (s *Source) waitBudgets(ctx context.Context, lane int) bool {
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
