package pubsubtest

import (
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
)

// SubStats are the counters of one subscription since it was created.
type SubStats struct {
	Published   int64 // messages enqueued for it (published to its topic after it was created)
	Delivered   int64 // deliveries, first ones and redeliveries, on streams and by Pull
	Redelivered int64 // deliveries with a delivery attempt above 1
	Acked       int64 // successful acks (the first one of each message)
	Nacked      int64 // modacks with 0 seconds of a live ack id
	ModAcks     int64 // deadline extensions (modacks with 1–600 s) of a live ack id
	Expired     int64 // leases that reached their ack deadline
	// DeadLettered counts messages forwarded to the dead-letter topic
	// (and so acknowledged here) after max_delivery_attempts.
	DeadLettered int64
	// Discarded counts unacknowledged messages dropped, when their turn
	// came, for being older than the subscription's
	// message_retention_duration.
	Discarded int64
	// Filtered counts messages that did not match the subscription's
	// filter: acknowledged at once, never delivered.
	Filtered int64
	// MaxOutstanding is the most messages ever outstanding at once on any
	// one stream of the subscription.
	MaxOutstanding int64
	// Outstanding is the number of messages delivered and not yet settled
	// (on any stream or by Pull), now; OutstandingBytes their size, as
	// server-side flow control counts it (the encoded PubsubMessage).
	Outstanding      int64
	OutstandingBytes int64
	// Backlog is the number of messages waiting to be delivered, now
	// (ready, behind their ordering key, or waiting out a retry backoff).
	Backlog int64
	// HeldBytes is what the messages the subscription holds count against
	// the backlog bound (WithMaxBacklogBytes), now: their encoded size
	// plus 160 bytes each (the server's bookkeeping), unacknowledged ones
	// and acknowledged ones it retains.
	HeldBytes int64
	// RejectedRequests counts requests refused with INVALID_ARGUMENT: a
	// later StreamingPull request with initial-only fields, a bad ack
	// deadline or modack, an ack or modack request over 512 KiB.
	RejectedRequests int64
	Streams          int64 // StreamingPull streams opened
}

// MessageStats are the counters of one message over all subscriptions.
type MessageStats struct {
	Deliveries int64 // deliveries, first ones and redeliveries
	Acks       int64 // successful acks (the first one on each subscription)
}

// MethodStats are the counters of one RPC method.
type MethodStats struct {
	Calls    int64 // calls (for StreamingPull: streams opened)
	Errors   int64 // calls that ended with an error, injected ones included
	Injected int64 // calls failed by FailNext or FailNextWith
	Stalled  int64 // calls whose answer StallEvery held back
	// Requests counts request messages (for StreamingPull every request on
	// every stream) and MaxRequestBytes is the largest encoded one.
	Requests        int64
	MaxRequestBytes int
}

// StreamInfo describes one StreamingPull stream, open or closed.
type StreamInfo struct {
	ID           int64 // 1, 2, … in order of opening, for KillStreams and StallStreams
	Subscription string
	// Values of the initial request.
	ClientID               string
	MaxOutstandingMessages int64
	MaxOutstandingBytes    int64
	ProtocolVersion        int64
	InitialAckDeadline     time.Duration
	// AckDeadline is the current stream ack deadline (later requests may
	// change it).
	AckDeadline time.Duration

	Requests         int64 // requests received, the initial one included
	Heartbeats       int64 // later requests with neither acks nor modacks
	HeartbeatReplies int64 // empty responses sent to answer heartbeats
	Responses        int64 // responses sent
	// Rejected counts later requests refused (each one ended the stream).
	Rejected int64

	Delivered               int64 // messages delivered on the stream
	Outstanding             int64 // delivered on it and unsettled, now
	OutstandingBytes        int64
	MaxOutstanding          int64 // most messages outstanding at once
	MaxOutstandingBytesSeen int64 // most bytes outstanding at once

	Open    bool
	Stalled bool
	Code    codes.Code // final status code once closed (OK while open)
	Err     string     // final error text, if any

	// RequestLog is every request received on the stream, the initial
	// one first, when the server records them (WithRecordStreamRequests);
	// nil otherwise. The requests must not be modified.
	RequestLog []*pubsubpb.StreamingPullRequest
}

// SubscriptionStats returns the counters of a subscription (full name, or
// short id expanded with the server's project); zero if it does not exist.
func (s *Server) SubscriptionStats(name string) SubStats {
	name = s.subName(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subs[name]
	if sub == nil {
		return SubStats{}
	}
	st := sub.stats
	st.Outstanding = int64(len(sub.out))
	for _, e := range sub.out {
		st.OutstandingBytes += e.msg.size
	}
	st.Backlog = sub.backlogLocked()
	st.HeldBytes = sub.feat.heldBytes
	return st
}

// MessageStats returns the counters of a message by id; zero if unknown, or
// forgotten (see WithMessageStatsLimit).
func (s *Server) MessageStats(id string) MessageStats {
	seq, err := strconv.ParseUint(id, 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.countersLocked(seq)
	if err != nil || c == nil {
		return MessageStats{}
	}
	return MessageStats{Deliveries: int64(c.deliveries), Acks: int64(c.acks)}
}

// MethodStats returns the counters of a method by short name
// ("Acknowledge", "ModifyAckDeadline", "StreamingPull", "Publish", …).
func (s *Server) MethodStats(method string) MethodStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.methods[method]; m != nil {
		return m.stats
	}
	return MethodStats{}
}

// Streams describes every stream ever opened on a subscription (full name
// or short id), open and closed, in order of opening. An empty name means
// every subscription, so that Streams("")[id-1] is the stream with that
// StreamInfo.ID.
func (s *Server) Streams(sub string) []StreamInfo {
	if sub != "" {
		sub = s.subName(sub)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StreamInfo
	for _, st := range s.streams {
		if sub == "" || st.info.Subscription == sub {
			out = append(out, st.infoLocked())
		}
	}
	return out
}

func (st *stream) infoLocked() StreamInfo {
	i := st.info
	i.Outstanding = st.outMsgs
	i.OutstandingBytes = st.outBytes
	// The log only grows, by append under s.mu, so the caller may read
	// this prefix of it without the lock.
	i.RequestLog = st.requests[:len(st.requests):len(st.requests)]
	return i
}
