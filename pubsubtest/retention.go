package pubsubtest

import (
	"time"

	"github.com/pubsubflow/pubsubflow/stage"
)

// retainedSince is the oldest publish time sub keeps a message for at now:
// its message_retention_duration ago, by default defaultSubRetention.
func (sub *subscription) retainedSince(now time.Time) time.Time {
	d := defaultSubRetention
	if r := sub.pb.GetMessageRetentionDuration(); r != nil {
		d = r.AsDuration()
	}
	return now.Add(-d)
}

// pruneRetainedLocked drops the retained acknowledged messages of sub
// published before its retention window. They are kept in order of
// acknowledgement, which is near publish order: one published long ago
// but acknowledged late may outlive its window until those before it go
// (Seek looks at publish times, so it never replays it).
func (s *Server) pruneRetainedLocked(sub *subscription, now time.Time) {
	r := &sub.feat.retained
	cutoff := sub.retainedSince(now)
	for r.Len() > 0 && r.Front().msg.publishTime().Before(cutoff) {
		e := r.Pop()
		e.state = stateGone
		s.unholdLocked(sub, e.msg.held())
	}
}

// dropRetainedLocked forgets every retained acknowledged message of sub.
func (s *Server) dropRetainedLocked(sub *subscription) {
	r := &sub.feat.retained
	for r.Len() > 0 {
		e := r.Pop()
		e.state = stateGone
		s.unholdLocked(sub, e.msg.held())
	}
}

// retainPublishedLocked keeps a message just published to t in t's
// retention log (when t retains messages) and in every snapshot of t.
func (s *Server) retainPublishedLocked(t *topic, m *message) {
	if t.pb.GetMessageRetentionDuration() != nil {
		t.feat.log.Push(m)
		t.feat.logBytes += m.held()
		s.feat.heldBytes += m.held()
		s.pruneTopicLogLocked(t, time.Now())
	}
	for sn := range t.feat.snaps {
		sn.after = append(sn.after, m)
		sn.bytes += m.held()
		s.feat.heldBytes += m.held()
	}
}

// pruneTopicLogLocked drops the messages of t's log published before its
// message_retention_duration at now. A topic without one keeps no log.
func (s *Server) pruneTopicLogLocked(t *topic, now time.Time) {
	d := t.pb.GetMessageRetentionDuration()
	if d == nil {
		return
	}
	cutoff := now.Add(-d.AsDuration())
	l := &t.feat.log
	for l.Len() > 0 && l.Front().publishTime().Before(cutoff) {
		m := l.Pop()
		t.feat.logBytes -= m.held()
		s.feat.heldBytes -= m.held()
	}
}

// dropTopicLogLocked forgets t's log (retention removed, or t deleted).
func (s *Server) dropTopicLogLocked(t *topic) {
	s.feat.heldBytes -= t.feat.logBytes
	t.feat.log = stage.Ring[*message]{}
	t.feat.logBytes = 0
}

// cutoff is a publish time before which messages are past a
// subscription's retention, kept as the timestamp's fields so that the
// check per delivered message is two integer comparisons.
type cutoff struct {
	sec  int64
	nsec int32
}

func retentionCutoff(sub *subscription, now time.Time) cutoff {
	c := sub.retainedSince(now)
	return cutoff{sec: c.Unix(), nsec: int32(c.Nanosecond())}
}

// dropStaleLocked drops a ready entry taken from the ready queue if its
// message was published before c: the service keeps an unacknowledged
// message only for the subscription's message_retention_duration. It
// reports whether it dropped it.
func (s *Server) dropStaleLocked(e *entry, c cutoff) bool {
	pt := e.msg.pb.PublishTime
	if pt.GetSeconds() > c.sec || pt.GetSeconds() == c.sec && pt.GetNanos() >= c.nsec {
		return false
	}
	sub := e.sub
	sub.stats.Discarded++
	e.state = stateGone
	s.unholdLocked(sub, e.msg.held())
	// No wake: Pull and StreamingPull drop while taking from the ready
	// queue and go on to the message released here; pruneAllLocked's
	// Publish wakes every subscription if it goes ahead.
	sub.releaseKeyLocked(e)
	return true
}
