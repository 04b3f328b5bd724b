package source

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// malformed is a set of kinds of response element the source refuses.
type malformed uint8

const (
	emptyAckID     malformed = 1 << iota // no ack id: it cannot be acked or nacked
	duplicateAckID                       // an ack id seen earlier in the same response
	missingMessage                       // an ack id without a message
)

var malformedNames = map[malformed]string{
	emptyAckID:     "a received message with an empty ack_id (dropped)",
	duplicateAckID: "the same ack_id twice in one response (the copy dropped)",
	missingMessage: "an ack_id without a message (nacked)",
}

// screen is one stream's state for refuseMalformed: the kinds already
// logged on it, and the set of ack ids of the response being screened
// (kept and cleared, not made anew for every response).
type screen struct {
	warned malformed
	seen   map[string]struct{}
}

// refuseMalformed drops the elements of a response that a handler must
// never see, before any bookkeeping: an empty ack id (nothing could settle
// it), an ack id already in this response (settling one copy would settle
// both), and an ack id without a message (nacked, so the server delivers
// it again, whole). Valid messages go on. Each kind is counted (Stats) and
// logged once per stream (sc.warned). The common case, nothing wrong,
// costs one pass and no allocation (the stream's set of ack ids is
// reused).
func (s *Source) refuseMalformed(stream int, rms []*pubsubpb.ReceivedMessage, sc *screen) []*pubsubpb.ReceivedMessage {
	var bad malformed
	if len(rms) > 1 {
		if sc.seen == nil {
			sc.seen = make(map[string]struct{}, len(rms))
		}
		defer clear(sc.seen)
	}
	keep := rms[:0:0]
	for i, rm := range rms {
		kind := s.check(rm, sc.seen, len(rms))
		if kind == 0 {
			if bad != 0 {
				keep = append(keep, rm)
			}
			continue
		}
		if bad == 0 {
			keep = append(make([]*pubsubpb.ReceivedMessage, 0, len(rms)), rms[:i]...)
		}
		bad |= kind
		switch kind {
		case emptyAckID:
			s.c.emptyAckIDs.Add(1)
		case duplicateAckID:
			s.c.duplicateAckIDs.Add(1)
		case missingMessage:
			s.c.missingMessages.Add(1)
			s.acks.NackTag(rm.GetAckId(), 0, false, nil)
		}
	}
	if bad == 0 {
		return rms
	}
	for k, what := range malformedNames {
		if bad&k != 0 && sc.warned&k == 0 {
			sc.warned |= k
			s.log.Warn("pubsubflow: the server sent "+what, "subscription", s.cfg.Subscription, "stream", stream)
		}
	}
	return keep
}

// check says what is wrong with rm, if anything.
func (s *Source) check(rm *pubsubpb.ReceivedMessage, seen map[string]struct{}, n int) malformed {
	id := rm.GetAckId()
	if id == "" {
		return emptyAckID
	}
	if n > 1 {
		if _, dup := seen[id]; dup {
			return duplicateAckID
		}
		seen[id] = struct{}{}
	}
	if rm.GetMessage() == nil {
		return missingMessage
	}
	return 0
}
