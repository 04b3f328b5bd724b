package pubsubtest

import (
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// backoff is the delay before a message that failed its attempts-th
// delivery is ready again: the retry policy's minimum backoff, doubled for
// each earlier failure, at most its maximum backoff.
func backoff(rp *pubsubpb.RetryPolicy, attempts int32) time.Duration {
	lo, hi := rp.GetMinimumBackoff().AsDuration(), rp.GetMaximumBackoff().AsDuration()
	d := lo
	for i := int32(1); i < attempts && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// delayLocked parks a released entry until readyAt.
func (s *Server) delayLocked(e *entry, readyAt time.Time) {
	e.state = stateDelayed
	e.deadline = readyAt
	e.sub.feat.delayed++
	s.feat.delayed.push(e)
	if e.heapIdx == 0 {
		select {
		case s.expiryWake <- struct{}{}:
		default:
		}
	}
}

// undelayLocked takes an entry out of the backoff heap.
func (s *Server) undelayLocked(e *entry) {
	s.feat.delayed.remove(e)
	e.sub.feat.delayed--
}

// releaseDelayedLocked makes ready every entry whose backoff is over and
// returns how long until the next one is (or -1 when none waits).
func (s *Server) releaseDelayedLocked(now time.Time) time.Duration {
	h := &s.feat.delayed
	for len(*h) > 0 {
		e := (*h)[0]
		if wait := e.deadline.Sub(now); wait > 0 {
			return wait
		}
		s.undelayLocked(e)
		s.requeueLocked(e)
	}
	return -1
}

// dropDelayedLocked removes every delayed entry of sub (deleted, or
// rebuilt by Seek).
func (s *Server) dropDelayedLocked(sub *subscription) {
	if sub.feat.delayed == 0 {
		return
	}
	old := s.feat.delayed
	keep := old[:0]
	for _, e := range old {
		if e.sub == sub {
			e.heapIdx = -1
			e.state = stateGone
			continue
		}
		e.heapIdx = len(keep)
		keep = append(keep, e)
	}
	clear(old[len(keep):])
	for i := len(keep)/2 - 1; i >= 0; i-- {
		keep.down(i)
	}
	s.feat.delayed = keep
	sub.feat.delayed = 0
}
