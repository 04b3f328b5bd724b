package pubsubtest

import (
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// WithMaxBacklogBytes bounds the memory the server's messages take: the
// encoded size of every message held plus 160 bytes (the server's
// bookkeeping), counted once for each subscription that holds it (unacknowledged, or acknowledged and retained for Seek),
// once if its topic retains it, and once for each snapshot that holds it.
// A Publish that would take the total past n fails with RESOURCE_EXHAUSTED
// and changes nothing; messages already accepted are never dropped to make
// room. n ≤ 0 (the default) means no bound.
func WithMaxBacklogBytes(n int64) Option { return func(c *config) { c.maxBacklogBytes = n } }

// WithDeliveryAttemptAlways sets ReceivedMessage.delivery_attempt (1, 2, …)
// on every delivery, which tests of redelivery find convenient. Without it
// the server does as the service does: it sets the attempt only on
// subscriptions with a dead-letter policy (0 otherwise).
func WithDeliveryAttemptAlways() Option { return func(c *config) { c.alwaysAttempts = true } }

// checkRoomLocked refuses msgs when holding them on every holder of t would
// pass the backlog bound. A message that a subscription's filter drops is
// still counted: the bound is checked before filters run, which keeps the
// check cheap and only errs on the safe side.
func (s *Server) checkRoomLocked(t *topic, msgs []*pubsubpb.PubsubMessage) error {
	limit := s.cfg.maxBacklogBytes
	if limit <= 0 {
		return nil
	}
	holders := int64(len(t.subs) + len(t.feat.snaps))
	if t.pb.MessageRetentionDuration != nil {
		holders++
	}
	var size int64
	for _, m := range msgs {
		// The id and publish time are not set yet: allow for them.
		size += int64(proto.Size(m)) + 48 + heldOverhead
	}
	need := size * holders
	if s.feat.heldBytes+need > limit {
		// Retained messages, topic logs and snapshots are pruned lazily:
		// before refusing, drop whatever is past its time.
		s.pruneAllLocked(time.Now())
	}
	if s.feat.heldBytes+need > limit {
		return status.Errorf(codes.ResourceExhausted,
			"pubsubtest: the backlog bound of %d bytes is reached (%d bytes held, this request needs %d); acknowledge messages, delete subscriptions or snapshots, or raise the bound",
			limit, s.feat.heldBytes, need)
	}
	return nil
}

// WithMessageStatsLimit keeps the per-message counters (MessageStats) of
// only about the last n messages published, so that a long-running server
// (the emulator) does not grow by a few bytes for every message it ever
// saw; older messages' counters read as zero. n ≤ 0 (the default) keeps
// them all.
func WithMessageStatsLimit(n int) Option { return func(c *config) { c.msgStatsLimit = n } }

// newCountersLocked makes the counters of a message being published and
// returns its seq, forgetting the oldest counters past the limit (half of
// them at a time, so that each message costs O(1) on average).
func (s *Server) newCountersLocked() uint64 {
	if limit := s.cfg.msgStatsLimit; limit > 0 && len(s.msgStats) >= 2*limit {
		drop := len(s.msgStats) - limit
		n := copy(s.msgStats, s.msgStats[drop:])
		clear(s.msgStats[n:])
		s.msgStats = s.msgStats[:n]
		s.msgBase += uint64(drop)
	}
	s.msgStats = append(s.msgStats, msgCounters{})
	return s.lastSeqLocked()
}

// lastSeqLocked is the seq of the last message published (0: none).
func (s *Server) lastSeqLocked() uint64 { return s.msgBase + uint64(len(s.msgStats)) }

// countersLocked returns the counters of the message seq, or nil if it is
// unknown or forgotten.
func (s *Server) countersLocked(seq uint64) *msgCounters {
	if seq <= s.msgBase || seq > s.lastSeqLocked() {
		return nil
	}
	return &s.msgStats[seq-1-s.msgBase]
}

// pruneAllLocked drops every retained message, topic log entry and
// snapshot that is past its time, and the unacknowledged messages past
// their subscription's retention at the front of its queue.
func (s *Server) pruneAllLocked(now time.Time) {
	for _, sub := range s.subs {
		s.pruneRetainedLocked(sub, now)
		// The ready queue is in publish order but for redeliveries: drop
		// from its front what is past the retention.
		stale := retentionCutoff(sub, now)
		for sub.ready.Len() > 0 && s.dropStaleLocked(sub.ready.Front(), stale) {
			sub.ready.Pop()
		}
	}
	for _, t := range s.topics {
		s.pruneTopicLogLocked(t, now)
	}
	if s.feat.snapshots != nil {
		s.snapshotsLocked(now)
	}
}
