package source

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

// path is a Source's settle path (message.Path). Every message the source
// decodes is bound to it, so whatever ends the message — a handler's Ack,
// a stage's Nack, the sink's policy, lease expiry, Close — reaches it
// exactly once: after the holders (leases, permits) were told, it counts
// the outcome and queues what the server is to hear.
type path struct{ c *core }

func (p *path) Settle(mi any, o uint32, delay time.Duration) {
	m := mi.(*Message)
	c := p.c
	// Another copy of its ack id is a redelivery from now on: accepted.
	c.heldIDs.release(m.AckID)
	c.held.remove(m)
	c.c.settled(o)
	if c.trace != nil {
		c.trace.settled(m, o)
	}
	switch o {
	case message.Ack:
		if m.ExactlyOnce {
			m.result.Store(newAckResult())
		}
		c.acks.AckTag(m.AckID, m.ExactlyOnce, (*ackTag)(m))
	case message.Nack, message.NackAfter:
		if o == message.Nack {
			delay = 0
		} else {
			// Once the nack lands the server holds the message this long.
			m.st.SetDeadline(time.Now().Add(delay), delay)
		}
		if m.ExactlyOnce {
			m.result.Store(newAckResult())
		}
		c.acks.NackTag(m.AckID, delay, m.ExactlyOnce, (*ackTag)(m))
	case message.Expired:
		if m.ExactlyOnce {
			// An ack now would not count: say so to whoever asks.
			r := newAckResult()
			r.resolve(ErrLeaseExpired)
			m.result.Store(r)
		}
		c.later.done(m, m.st.Deadline())
		c.expiries.Broadcast() // a hand-off waiting with m drops it
	default: // NoOp: nothing to send; the server counts it until its deadline
		c.later.done(m, m.st.Deadline())
	}
}

// ErrLeaseExpired is the AckResult of an exactly-once message whose lease
// ended before it was settled (past max extension, or its deadline passed
// without a confirmed extension): the server may have given it out again,
// so an ack of this copy does not count.
var ErrLeaseExpired = errors.New("pubsubflow/source: the message's lease expired before it was settled")

// ackTag is a message as the acknowledger's Tag: it hears when the
// message's ack or nack is final.
type ackTag Message

// Lapsed tells the acknowledger, as it sends the ack, that the message's
// deadline is too close (or past) for the ack to count: it is left out.
func (t *ackTag) Lapsed(now time.Time) bool { return t.st.Lapsed(now) }

func (t *ackTag) AckDone(err error) {
	m := (*Message)(t)
	c := m.st.Path.(*path).c
	if m.Outcome() == Ack {
		c.c.ackFinal.Add(1)
	}
	switch {
	case errors.Is(err, ack.ErrLapsed):
		// Acked in time, but the ack could not leave before the deadline
		// (behind a slow request): an expiry, not an ack.
		c.c.ackLapsed.Add(1)
		err = ErrLeaseExpired
	case err != nil:
		c.c.ackFailures.Add(1)
		if m.Outcome() == Ack {
			c.c.ackRefused.Add(1)
		}
		err = ackError(err)
	}
	if r := m.result.Load(); r != nil {
		r.resolve(err)
	}
	if m.Outcome() == NackAfter {
		c.later.done(m, m.st.Deadline())
		return
	}
	m.st.Done(m)
}

// confirmed is the acknowledger's Confirmed: the acks and nacks of one
// request the server accepted whole, answered at now. It does for each
// what AckDone(nil) does, with one clock read and one counter update for
// the batch.
func (c *core) confirmed(tags []ack.Tag, now time.Time) {
	var acks int64
	for _, t := range tags {
		at, ok := t.(*ackTag)
		if !ok {
			if t != nil {
				t.AckDone(nil)
			}
			continue
		}
		m := (*Message)(at)
		o := m.Outcome()
		if o == Ack {
			acks++
		}
		if r := m.result.Load(); r != nil {
			r.resolve(nil)
		}
		if o == NackAfter {
			c.later.done(m, m.st.Deadline())
			continue
		}
		m.st.DoneAt(m, now)
	}
	if acks > 0 {
		c.c.ackFinal.Add(acks)
	}
}

// Stats is a snapshot of a Source's counters.
type Stats struct {
	// Received counts messages decoded; Redelivered those with a delivery
	// attempt above 1.
	Received    uint64
	Redelivered uint64
	// Settled messages by outcome. Acked counts the acks the server
	// accepted and those on their way (Acking): an ack it refused counts in
	// AckFailures only, and one that could not be sent before the
	// message's deadline counts as an expiry.
	Acked, Nacked, NoOps, Expired uint64
	// AckRefused counts acks that failed for good (also in AckFailures):
	// settled, but not acked, so the server delivers them again.
	AckRefused uint64
	// Unsettled is what the source's messages hold now, wherever they
	// are: Received less the settled ones (Acked, Nacked, NoOps, Expired
	// and AckRefused).
	Unsettled int64
	// Acking counts acked messages whose ack is not final yet.
	Acking int64
	// AckFailures counts acks and nacks that failed for good.
	AckFailures uint64
	// EmptyAckIDs, DuplicateAckIDs and MissingMessages count response
	// elements the source refused before any bookkeeping (a misbehaving
	// server or proxy): no ack id; an ack id already held, within a
	// response or from an earlier one on any stream and not settled yet
	// (neither acked nor nacked: the held copy answers for it; once that
	// one is settled the same ack id is accepted again); an ack id without
	// a message (nacked). No handler sees them.
	EmptyAckIDs, DuplicateAckIDs, MissingMessages uint64
	// Reconnects counts stream restarts.
	Reconnects uint64
	// LastError is the most recent stream or ack error.
	LastError error
}

// counters back Stats; each is one atomic add on its hot path.
type counters struct {
	received, redelivered         atomic.Uint64
	acked, nacked, noops, expired atomic.Uint64
	ackFailures, reconnects       atomic.Uint64
	ackLapsed                     atomic.Uint64 // acks left out: their lease lapsed first
	ackRefused                    atomic.Uint64 // acks that failed for good
	emptyAckIDs, duplicateAckIDs  atomic.Uint64
	missingMessages               atomic.Uint64
	ackFinal                      atomic.Int64 // acks whose fate is final: Acking is acked − ackFinal
	mu                            sync.Mutex
	lastErr                       error
}

func (c *counters) settled(o uint32) {
	switch o {
	case message.Ack:
		c.acked.Add(1)
	case message.Nack, message.NackAfter:
		c.nacked.Add(1)
	case message.NoOp:
		c.noops.Add(1)
	case message.Expired:
		c.expired.Add(1)
	}
}

func (c *counters) event(e event.Event) {
	if e.Kind == event.Reconnect {
		c.reconnects.Add(1)
	}
	if e.Err != nil {
		c.mu.Lock()
		c.lastErr = e.Err
		c.mu.Unlock()
	}
}

func (c *counters) stats(*ack.Acknowledger) Stats {
	c.mu.Lock()
	last := c.lastErr
	c.mu.Unlock()
	// The settled counts before received, and the final acks before the
	// acks: a message counted in between shows up in the larger figure
	// only, so Unsettled and Acking are never negative.
	ackFinal, lapsed, refused := c.ackFinal.Load(), c.ackLapsed.Load(), c.ackRefused.Load()
	acked, nacked, noops, expired := c.acked.Load(), c.nacked.Load(), c.noops.Load(), c.expired.Load()
	received := c.received.Load()
	return Stats{
		Received:        received,
		Redelivered:     c.redelivered.Load(),
		Acked:           acked - lapsed - refused,
		Nacked:          nacked,
		NoOps:           noops,
		Expired:         expired + lapsed,
		AckRefused:      refused,
		Unsettled:       int64(received - acked - nacked - noops - expired),
		Acking:          int64(acked) - ackFinal,
		AckFailures:     c.ackFailures.Load(),
		EmptyAckIDs:     c.emptyAckIDs.Load(),
		DuplicateAckIDs: c.duplicateAckIDs.Load(),
		MissingMessages: c.missingMessages.Load(),
		Reconnects:      c.reconnects.Load(),
		LastError:       last,
	}
}

// registry is every message a source received and has not seen settled,
// linked through the messages themselves (Message.reg, prev, next) in
// regShards lists: a message joins on receipt and leaves when it settles
// (path.Settle), whatever settles it. So it holds exactly the unsettled
// messages, costs no allocation, needs no clean-up pass, and a settled
// message points at no other: one held for long keeps only its own data
// alive.
type registry struct {
	shards [regShards]regShard
	next   atomic.Uint32 // where the next batch starts spreading
}

// regShards is how many locks the registry is spread over, so that the
// handlers settling in parallel rarely meet on one.
const regShards = 16

type regShard struct {
	mu     sync.Mutex
	head   *Message
	closed bool
	_      [48]byte // one cache line each
}

// add links a response's messages, spread over the shards (one lock per
// shard for the batch); false once the registry is closed (some may be
// linked then: settling them unlinks them).
func (r *registry) add(ms []*Message) bool {
	start := int(r.next.Add(1))
	for j := range min(len(ms), regShards) {
		sh := &r.shards[(start+j)%regShards]
		sh.mu.Lock()
		if sh.closed {
			sh.mu.Unlock()
			return false
		}
		for i := j; i < len(ms); i += regShards {
			m := ms[i]
			m.reg, m.next = sh, sh.head
			if sh.head != nil {
				sh.head.prev = m
			}
			sh.head = m
		}
		sh.mu.Unlock()
	}
	return true
}

// remove unlinks m (settled); it does nothing if m is not linked.
func (r *registry) remove(m *Message) {
	sh := m.reg
	if sh == nil {
		return
	}
	sh.mu.Lock()
	switch {
	case m.prev != nil:
		m.prev.next = m.next
	case sh.head == m:
		sh.head = m.next
	default: // not linked (any more)
		sh.mu.Unlock()
		return
	}
	if m.next != nil {
		m.next.prev = m.prev
	}
	m.prev, m.next = nil, nil
	sh.mu.Unlock()
}

// each calls f for every unsettled message, outside the locks.
func (r *registry) each(f func(*Message)) {
	var ms []*Message
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for m := sh.head; m != nil; m = m.next {
			ms = append(ms, m)
		}
		sh.mu.Unlock()
	}
	for _, m := range ms {
		if m.st.Outcome() == message.Pending {
			f(m)
		}
	}
}

// close refuses further messages and calls f for every unsettled one.
func (r *registry) close(f func(*Message)) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		sh.closed = true
		sh.mu.Unlock()
	}
	r.each(f)
}

// AckError is why an ack or nack on an exactly-once subscription failed
// (AckResult.Get). errors.Is tells the kind (ErrAckRefused,
// ErrAckRetriesExhausted, ErrClosed); status.Code(err) is the RPC's status
// code.
type AckError struct {
	AckID string // the message's ack id
	// Reason is the server's per-ack-id reason, if it gave one:
	// "PERMANENT_FAILURE_INVALID_ACK_ID" for an ack id that expired, was
	// already settled or is malformed (the message will be, or was,
	// redelivered).
	Reason string
	Kind   error // ErrAckRefused, ErrAckRetriesExhausted or ErrClosed
	Err    error // the RPC's error; nil when the source was closed first
}

// Kinds of AckError.
var (
	// ErrAckRefused: the server refused the ack id for good (a
	// PERMANENT_FAILURE_* reason such as an expired ack id, or a status
	// that is not retried).
	ErrAckRefused = errors.New("pubsubflow/source: ack refused")
	// ErrAckRetriesExhausted: transient failures lasted past the retry
	// deadline (60 s; 600 s exactly-once).
	ErrAckRetriesExhausted = errors.New("pubsubflow/source: ack retries exhausted")
	// ErrClosed: the source was closed before the ack or nack was
	// confirmed, or it was made after Close.
	ErrClosed = errors.New("pubsubflow/source: closed")
)

// Error describes the failure: kind, ack id, reason and the RPC's error.
func (e *AckError) Error() string {
	return (&ack.IDError{AckID: e.AckID, Reason: e.Reason, Kind: e.Kind, Err: e.Err}).Error()
}

// Unwrap returns the kind and the RPC's error.
func (e *AckError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// ackError turns the acknowledger's error into an *AckError.
func ackError(err error) error {
	var ie *ack.IDError
	if !errors.As(err, &ie) {
		return err
	}
	kind := ErrAckRefused
	switch {
	case errors.Is(ie.Kind, ack.ErrRetryExhausted):
		kind = ErrAckRetriesExhausted
	case errors.Is(ie.Kind, ack.ErrClosed):
		kind = ErrClosed
	}
	return &AckError{AckID: ie.AckID, Reason: ie.Reason, Kind: kind, Err: ie.Err}
}
