package pubsubtest

import (
	"context"
	"slices"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/pubsubflow/pubsubflow/stage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Seek implements pubsubpb.SubscriberServer.
//
// To a time: messages published before it become acknowledged, and
// messages published at or after it become unacknowledged, as far as they
// are still held: unacknowledged ones, acknowledged ones the subscription
// retains (retain_acked_messages) within its retention window, and those
// its topic retains (topic message_retention_duration), even from before
// the subscription existed.
//
// To a snapshot of the same topic: exactly the messages unacknowledged when
// it was taken, and those published to the topic since, become
// unacknowledged; every other message becomes acknowledged.
//
// Either way the subscription's filter still applies, outstanding ack ids
// die (their messages, if unacknowledged, are delivered again) and the
// acknowledged messages are retained if the subscription retains them.
func (s *rpcServer) Seek(_ context.Context, req *pubsubpb.SeekRequest) (*pubsubpb.SeekResponse, error) {
	now := time.Now()
	// The name is not checked by the service's rules here: a malformed one
	// is simply NOT_FOUND, as it always has been in pubsubtest.
	return with(s.Server, subKind.unchecked(), req.GetSubscription(), func(sub *subscription) (*pubsubpb.SeekResponse, error) {
		switch target := req.Target.(type) {
		case *pubsubpb.SeekRequest_Time:
			if err := target.Time.CheckValid(); err != nil {
				return nil, invalidArg("Invalid seek time: %v.", err)
			}
			s.seekTimeLocked(sub, target.Time.AsTime(), now)
		case *pubsubpb.SeekRequest_Snapshot:
			sn, err := lookup(s.snapshotsLocked(now), target.Snapshot)
			if err != nil {
				return nil, err
			}
			if sub.pb.Topic != sn.pb.Topic {
				return nil, status.Errorf(codes.FailedPrecondition, "The snapshot's topic %s is not the subscription's topic %s.", sn.pb.Topic, sub.pb.Topic)
			}
			s.seekSnapshotLocked(sub, sn)
		default:
			return nil, invalidArg("A seek target (time or snapshot) is required.")
		}
		return &pubsubpb.SeekResponse{}, nil
	})
}

// seekTimeLocked seeks sub to the time at: see Seek.
func (s *Server) seekTimeLocked(sub *subscription, at, now time.Time) {
	cutoff := sub.retainedSince(now)
	var extra []*message
	if t := sub.topic; t != nil && t.pb.MessageRetentionDuration != nil {
		s.pruneTopicLogLocked(t, now)
		extra = slices.AppendSeq(extra, t.feat.log.All())
		cutoff = time.Time{} // the topic's window, already pruned
	}
	s.rebuildLocked(sub, extra, func(m *message) bool {
		pt := m.publishTime()
		return !pt.Before(at) && !pt.Before(cutoff)
	})
}

// seekSnapshotLocked seeks sub to sn, a snapshot of its topic: see Seek.
func (s *Server) seekSnapshotLocked(sub *subscription, sn *snapshot) {
	in := make(map[uint64]bool, len(sn.msgs))
	for _, m := range sn.msgs {
		in[m.seq] = true
	}
	extra := append(append([]*message(nil), sn.msgs...), sn.after...)
	s.rebuildLocked(sub, extra, func(m *message) bool { return in[m.seq] || m.seq > sn.seq })
}

// rebuildLocked resets sub so that, among the messages it holds and extra,
// exactly those for which unacked holds (and which match its filter) are
// unacknowledged, ready in publish order; the others are acknowledged
// (and retained when the subscription retains acknowledged messages).
func (s *Server) rebuildLocked(sub *subscription, extra []*message, unacked func(*message) bool) {
	old := s.entriesLocked(sub, true)
	// Take every entry out of where it is: ack ids die, stream budgets
	// return, backoffs end.
	for _, e := range old {
		if e.state == stateOut {
			s.releaseLocked(e)
		}
	}
	s.dropDelayedLocked(sub)
	sub.ready = stage.Ring[*entry]{}
	sub.keys = make(map[string]*stage.Ring[*entry])
	sub.feat.retained = stage.Ring[*entry]{}
	s.unholdLocked(sub, sub.feat.heldBytes)

	byseq := make(map[uint64]*entry, len(old))
	for _, e := range old {
		byseq[e.msg.seq] = e
	}
	all := make([]*message, 0, len(old)+len(extra))
	for _, e := range old {
		all = append(all, e.msg)
	}
	for _, m := range extra {
		if _, held := byseq[m.seq]; !held {
			all = append(all, m)
		}
	}
	sortMessages(all)
	retain := sub.pb.GetRetainAckedMessages()
	var prev uint64
	for _, m := range all {
		if m.seq == prev {
			continue // a message of extra that extra repeats
		}
		prev = m.seq
		e := byseq[m.seq] // nil for a message the subscription did not hold
		match := sub.feat.filter == nil || sub.feat.filter.match(m.pb.Attributes)
		if match && unacked(m) {
			if e == nil {
				e = &entry{msg: m, sub: sub, heapIdx: -1}
			}
			e.ackID, e.stream = "", nil
			s.holdLocked(sub, m.held())
			s.enqueueNewLocked(e)
			continue
		}
		if e != nil && retain {
			e.state = stateAcked
			sub.feat.retained.Push(e)
			s.holdLocked(sub, m.held())
		} else if e != nil {
			e.state = stateGone
		}
	}
	s.pruneRetainedLocked(sub, time.Now())
	s.wakeSubLocked(sub)
}

func sortMessages(ms []*message) { slices.SortFunc(ms, compareSeq) }
