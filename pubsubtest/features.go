package pubsubtest

import (
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/pubsubflow/pubsubflow/stage"
	"google.golang.org/protobuf/proto"
)

// serverFeatures is the server's state for dead-letter and retry policies,
// retention, snapshots and the backlog bound. Guarded by Server.mu.
type serverFeatures struct {
	// delayed holds entries waiting out a retry policy's backoff, by the
	// time they become ready again (entry.deadline), in the same kind of
	// heap as the leases: one timer, no goroutine per message.
	delayed leaseHeap
	// snapshots by full name.
	snapshots map[string]*snapshot
	// heldBytes counts every message held, by its encoded size plus
	// heldOverhead: once for each subscription holding it unacknowledged
	// or retained after its ack, once for a topic retaining it, once for
	// each snapshot holding it. Publish fails with RESOURCE_EXHAUSTED past
	// the backlog bound.
	heldBytes int64
}

// subFeatures is a subscription's state for the same features.
type subFeatures struct {
	filter filter // nil: every message
	// retained are acknowledged entries kept for Seek while
	// retain_acked_messages is set, in order of acknowledgement.
	retained  stage.Ring[*entry]
	delayed   int   // entries of this subscription in serverFeatures.delayed
	heldBytes int64 // this subscription's share of serverFeatures.heldBytes
}

// topicFeatures is a topic's state for retention and snapshots.
type topicFeatures struct {
	// log holds every message published while the topic has a
	// message_retention_duration, in publish order, for Seek.
	log      stage.Ring[*message]
	logBytes int64
	// snaps are the snapshots of subscriptions of this topic: each keeps
	// the messages published after it was taken.
	snaps map[*snapshot]struct{}
}

// stateDelayed is the entry state beyond those of lease.go: nacked or
// expired, waiting out the retry policy's backoff in
// serverFeatures.delayed.
const stateDelayed = stateGone + 1

func (m *message) publishTime() time.Time { return m.pb.GetPublishTime().AsTime() }

// heldOverhead is what the backlog bound counts for each held copy of a
// message beyond its encoded size: the server's bookkeeping for it, so
// that a backlog of small messages is bounded too.
const heldOverhead = 160

// held is what one held copy of m counts against the backlog bound.
func (m *message) held() int64 { return m.size + heldOverhead }

// holdLocked counts an entry's message as held by its subscription.
func (s *Server) holdLocked(sub *subscription, size int64) {
	sub.feat.heldBytes += size
	s.feat.heldBytes += size
}

// unholdLocked undoes holdLocked.
func (s *Server) unholdLocked(sub *subscription, size int64) {
	sub.feat.heldBytes -= size
	s.feat.heldBytes -= size
}

// settledLocked takes an entry out of the backlog for good (acknowledged,
// dead-lettered, or not matching the filter): it is retained for Seek if
// the subscription retains acknowledged messages, and the next message of
// its ordering key becomes ready.
func (s *Server) settledLocked(e *entry) {
	sub := e.sub
	e.state = stateAcked
	if sub.pb.GetRetainAckedMessages() {
		sub.feat.retained.Push(e)
		s.pruneRetainedLocked(sub, time.Now())
	} else {
		s.unholdLocked(sub, e.msg.held())
	}
	if sub.releaseKeyLocked(e) {
		s.wakeSubLocked(sub)
	}
}

// releaseKeyLocked is for an entry leaving the backlog for good (settled,
// or dropped past retention): the next message of its ordering key becomes
// ready, or, with none waiting, the key is free again. It reports whether a
// message became ready; the caller wakes the subscription's receivers if
// it needs to.
func (sub *subscription) releaseKeyLocked(e *entry) bool {
	key := e.msg.pb.OrderingKey
	if key == "" || !sub.ordered() {
		return false
	}
	q := sub.keys[key]
	if q == nil || q.Len() == 0 {
		delete(sub.keys, key)
		return false
	}
	next := q.Pop()
	next.state = stateReady
	sub.ready.Push(next)
	return true
}

// backlogLocked is the number of messages of sub waiting to be delivered:
// ready, behind their ordering key, or waiting out a backoff.
func (sub *subscription) backlogLocked() int64 {
	n := int64(sub.ready.Len() + sub.feat.delayed)
	for _, q := range sub.keys {
		n += int64(q.Len())
	}
	return n
}

// topicUpdatedLocked installs a topic's new config: without retention its
// log goes, and its subscriptions report the new retention.
func (s *Server) topicUpdatedLocked(t *topic, next *pubsubpb.Topic) {
	t.pb = next // pruneTopicLogLocked reads the new window
	if next.MessageRetentionDuration == nil {
		s.dropTopicLogLocked(t)
	} else {
		s.pruneTopicLogLocked(t, time.Now())
	}
	for _, sub := range t.subs {
		cfg := proto.Clone(sub.pb).(*pubsubpb.Subscription)
		cfg.TopicMessageRetentionDuration = next.MessageRetentionDuration
		sub.setConfig(cfg)
	}
}

// topicDeletedLocked forgets a deleted topic's log; its snapshots stay
// (usable by its remaining subscriptions) but take no more messages.
func (s *Server) topicDeletedLocked(t *topic) {
	s.dropTopicLogLocked(t)
	for sn := range t.feat.snaps {
		sn.topic = nil
	}
	t.feat.snaps = nil
}

// subUpdatedLocked applies a subscription's new config: no retained
// messages once it stops retaining them, the retention window applied.
func (s *Server) subUpdatedLocked(sub *subscription, next *pubsubpb.Subscription) {
	if !next.RetainAckedMessages {
		s.dropRetainedLocked(sub)
	}
	sub.pb = next // pruneRetainedLocked reads the new window
	s.pruneRetainedLocked(sub, time.Now())
}

// subDeletedLocked releases what a deleted subscription holds.
func (s *Server) subDeletedLocked(sub *subscription) {
	s.dropDelayedLocked(sub)
	s.dropRetainedLocked(sub)
	s.unholdLocked(sub, sub.feat.heldBytes)
}

// subDetachedLocked drops every message of a detached subscription: it
// will never deliver them, so they must not count against the bound.
func (s *Server) subDetachedLocked(sub *subscription) {
	for _, e := range sub.out {
		s.releaseLocked(e) // deletes from sub.out, which range allows
		e.state = stateGone
	}
	sub.ready = stage.Ring[*entry]{}
	sub.keys = make(map[string]*stage.Ring[*entry])
	s.subDeletedLocked(sub)
}
