package source

import (
	"hash/maphash"

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
	seen   idSet
}

// idSet is a set of the ack ids of one response, for the duplicate check:
// an open-addressed table of their hashes and indexes (no string is
// copied or kept; a hash seen twice is confirmed by comparing the ids),
// cleared and reused response after response. It costs a hash per id
// where a map costs a hash, a string store and its growth.
type idSet struct {
	seed  maphash.Seed
	slots []idSlot // len a power of two, at least twice the ids
	used  []uint32 // the slots taken, to clear them
}

type idSlot struct {
	hash uint64
	idx  int32 // index into the response + 1; 0: empty
}

// reset makes the set empty and ready for n ids.
func (s *idSet) reset(n int) {
	for _, i := range s.used {
		s.slots[i] = idSlot{}
	}
	s.used = s.used[:0]
	if len(s.slots) < 2*n {
		size := 16
		for size < 2*n {
			size *= 2
		}
		s.slots = make([]idSlot, size)
		if s.seed == (maphash.Seed{}) {
			s.seed = maphash.MakeSeed()
		}
	}
}

// add records rms[i]'s ack id, reporting false if an earlier one of rms
// has the same.
func (s *idSet) add(rms []*pubsubpb.ReceivedMessage, i int) bool {
	id := rms[i].GetAckId()
	h := maphash.String(s.seed, id)
	mask := uint64(len(s.slots) - 1)
	for j := h & mask; ; j = (j + 1) & mask {
		sl := &s.slots[j]
		if sl.idx == 0 {
			*sl = idSlot{hash: h, idx: int32(i + 1)}
			s.used = append(s.used, uint32(j))
			return true
		}
		if sl.hash == h && rms[sl.idx-1].GetAckId() == id {
			return false
		}
	}
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
		sc.seen.reset(len(rms))
	}
	keep := rms[:0:0]
	for i, rm := range rms {
		kind := s.check(rms, i, &sc.seen)
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
func (s *Source) check(rms []*pubsubpb.ReceivedMessage, i int, seen *idSet) malformed {
	rm := rms[i]
	if rm.GetAckId() == "" {
		return emptyAckID
	}
	if len(rms) > 1 && !seen.add(rms, i) {
		return duplicateAckID
	}
	if rm.GetMessage() == nil {
		return missingMessage
	}
	return 0
}
