package source

import (
	"hash/maphash"
	"sync"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// malformed is a set of kinds of response element the source refuses.
type malformed uint8

const (
	emptyAckID     malformed = 1 << iota // no ack id: it cannot be acked or nacked
	duplicateAckID                       // an ack id already held, in this response or an earlier one
	missingMessage                       // an ack id without a message
)

var malformedNames = map[malformed]string{
	emptyAckID:     "a received message with an empty ack_id (dropped)",
	duplicateAckID: "an ack_id the source already holds, in the same response or an earlier one (the copy dropped)",
	missingMessage: "an ack_id without a message (nacked)",
}

// screen is one stream's state for refuseMalformed: the kinds already
// logged on it, and scratch for the ack ids without a message.
type screen struct {
	warned  malformed
	missing []string
}

// heldShards spreads the held ack ids over locks, so that the streams
// claiming and the handlers settling rarely meet on one.
const heldShards = 32

// heldIDs is the set of ack ids of the messages a source holds: claimed as
// a response is screened, released when the message is settled. An ack id
// names one delivery, so a second copy while one is held is refused:
// acking either would settle both.
type heldIDs struct {
	seed   maphash.Seed
	shards [heldShards]heldShard
}

type heldShard struct {
	mu  sync.Mutex
	ids hashSet  // the ids' hashes
	_   [24]byte // one cache line each
}

func newHeldIDs() *heldIDs {
	return &heldIDs{seed: maphash.MakeSeed()}
}

// claim records id as held, reporting false if it already was. Only the
// 64-bit hash is kept: a new id colliding with a held one (about once in
// 10¹⁵ messages at 10⁴ held) is refused as a copy, and only delayed by it.
func (h *heldIDs) claim(id string) bool {
	k, sh := h.of(id)
	sh.mu.Lock()
	ok := sh.ids.add(k)
	sh.mu.Unlock()
	return ok
}

// release forgets id, which was claimed: its message was settled.
func (h *heldIDs) release(id string) {
	k, sh := h.of(id)
	sh.mu.Lock()
	sh.ids.remove(k)
	sh.mu.Unlock()
}

// of is id's hash (never 0: hashSet's empty) and shard.
func (h *heldIDs) of(id string) (uint64, *heldShard) {
	k := max(maphash.String(h.seed, id), 1)
	return k, &h.shards[k%heldShards]
}

// refuseMalformed drops the elements of a response a handler must never
// see: an empty ack id, an ack id the source already holds (neither acked
// nor nacked: the held copy answers for it), and an ack id without a
// message (nacked, so the server delivers it again, whole). Valid messages
// go on, their ack ids claimed. Each kind is counted and logged once per
// stream. Nothing wrong costs one pass and a claim per message.
func (s *Source) refuseMalformed(stream int, rms []*pubsubpb.ReceivedMessage, sc *screen) []*pubsubpb.ReceivedMessage {
	var bad malformed
	keep := rms[:0:0]
	for i, rm := range rms {
		kind := s.check(rm)
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
		s.refused(kind, rm, sc)
	}
	if bad == 0 {
		return rms
	}
	// The ids nacked were claimed, so that a later copy was refused;
	// nothing holds them now.
	for _, id := range sc.missing {
		s.heldIDs.release(id)
	}
	clear(sc.missing)
	sc.missing = sc.missing[:0]
	for k, what := range malformedNames {
		if bad&k != 0 && sc.warned&k == 0 {
			sc.warned |= k
			s.log.Warn("pubsubflow: the server sent "+what, "subscription", s.cfg.Subscription, "stream", stream)
		}
	}
	return keep
}

// refused counts rm, refused as kind, and nacks one without a message.
func (s *Source) refused(kind malformed, rm *pubsubpb.ReceivedMessage, sc *screen) {
	switch kind {
	case emptyAckID:
		s.c.emptyAckIDs.Add(1)
	case duplicateAckID:
		s.c.duplicateAckIDs.Add(1)
	case missingMessage:
		s.c.missingMessages.Add(1)
		sc.missing = append(sc.missing, rm.GetAckId())
		s.acks.NackTag(rm.GetAckId(), 0, false, nil)
	}
}

// check says what is wrong with rm; unless its ack id is empty or already
// held, the id is claimed.
func (s *Source) check(rm *pubsubpb.ReceivedMessage) malformed {
	id := rm.GetAckId()
	if id == "" {
		return emptyAckID
	}
	if !s.heldIDs.claim(id) {
		return duplicateAckID
	}
	if rm.GetMessage() == nil {
		return missingMessage
	}
	return 0
}
