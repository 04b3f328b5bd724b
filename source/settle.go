package source

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/event"
)

// path is a Source's settle path (message.Path), the one place every
// cause of a settle — a handler's Ack, a stage's Nack, the sink's policy,
// expiry, Close — reaches once, after the holders (leases, permits) were
// told: it counts the outcome and queues what the server is to hear.
type path struct{ c *core }

func (p *path) Settle(mi any, o uint32, delay time.Duration) {
	m, c, out := mi.(*Message), p.c, Outcome(o)
	// Another copy of its ack id is a redelivery from now on: accepted.
	c.heldIDs.release(m.AckID)
	c.held.remove(m)
	c.c.settled[out].Add(1)
	if c.trace != nil {
		c.trace.settled(m, out)
	}
	if m.ExactlyOnce && out != NoOp {
		r := new(AckResult)
		r.r.Init()
		if out == Expired {
			r.r.AckDone(ErrLeaseExpired) // an ack now would not count
		}
		m.result.Store(r)
	}
	switch out {
	case Ack:
		c.acks.AckTag(m.AckID, m.ExactlyOnce, (*ackTag)(m))
	case Nack:
		c.acks.NackTag(m.AckID, 0, m.ExactlyOnce, (*ackTag)(m))
	case NackAfter:
		// Once the nack lands the server holds the message this long.
		m.st.SetDeadline(time.Now().Add(delay), delay)
		c.acks.NackTag(m.AckID, delay, m.ExactlyOnce, (*ackTag)(m))
	case Expired:
		c.later.done(m, m.st.Deadline())
		c.expiries.Broadcast() // a hand-off waiting with m drops it
	default: // NoOp: the server counts it until its deadline
		c.later.done(m, m.st.Deadline())
	}
}

// ErrLeaseExpired is the AckResult of an exactly-once message whose lease
// ended before it was settled: the server may have given it out again, so
// an ack of this copy does not count.
var ErrLeaseExpired = errors.New("pubsubflow/source: the message's lease expired before it was settled")

// ackTag is a message as the acknowledger's Tag.
type ackTag Message

// Lapsed tells the acknowledger, as it sends the ack, that the message's
// deadline is too close for the ack to count: it is left out.
func (t *ackTag) Lapsed(now time.Time) bool { return t.st.Lapsed(now) }

func (t *ackTag) AckDone(err error) {
	m := (*Message)(t)
	c := m.st.Path.(*path).c
	if m.Outcome() == Ack {
		c.c.ackFinal.Add(1)
	}
	switch {
	case errors.Is(err, ack.ErrLapsed):
		// Acked in time, but the ack could not leave before the deadline.
		c.c.ackLapsed.Add(1)
		err = ErrLeaseExpired
	case err != nil:
		c.c.ackFailures.Add(1)
		if m.Outcome() == Ack {
			c.c.ackRefused.Add(1)
		}
		err = ackError(err)
	}
	c.finish(m, err, time.Now())
}

// confirmed is the acknowledger's Confirmed: AckDone(nil) for each tag of
// a request the server accepted whole, answered at now.
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
		if m.Outcome() == Ack {
			acks++
		}
		c.finish(m, nil, now)
	}
	if acks > 0 {
		c.c.ackFinal.Add(acks)
	}
}

// finish ends m's ack or nack, final at now with err. A nack with a delay
// leaves the message the server's until that delay has passed.
func (c *core) finish(m *Message, err error, now time.Time) {
	if r := m.result.Load(); r != nil {
		r.r.AckDone(err)
	}
	if m.Outcome() == NackAfter {
		c.later.done(m, m.st.Deadline())
		return
	}
	m.st.DoneAt(m, now)
}

// Stats is a snapshot of a Source's counters.
type Stats struct {
	// Received counts messages decoded; Redelivered those with a delivery
	// attempt above 1.
	Received    uint64
	Redelivered uint64
	// Settled messages by outcome. Acked counts acks the server accepted
	// or that are on their way (Acking); a refused ack counts in
	// AckFailures only, and one sent too late for its deadline as Expired.
	Acked, Nacked, NoOps, Expired uint64
	// AckRefused counts acks that failed for good (also in AckFailures):
	// the server delivers them again.
	AckRefused uint64
	// Unsettled is Received less the settled (Acked, Nacked, NoOps,
	// Expired and AckRefused).
	Unsettled int64
	// Acking counts acked messages whose ack is not final yet.
	Acking int64
	// AckFailures counts acks and nacks that failed for good.
	AckFailures uint64
	// EmptyAckIDs, DuplicateAckIDs and MissingMessages count response
	// elements refused before any bookkeeping (a misbehaving server): no
	// ack id; an ack id held by an unsettled copy (received again once
	// that copy is settled); an ack id without a message (nacked).
	EmptyAckIDs, DuplicateAckIDs, MissingMessages uint64
	// Reconnects counts stream restarts.
	Reconnects uint64
	// LastError is the most recent stream or ack error.
	LastError error
}

// counters back Stats; each is one atomic add on its hot path.
type counters struct {
	received, redelivered        atomic.Uint64
	settled                      [Expired + 1]atomic.Uint64 // by outcome
	ackFailures, reconnects      atomic.Uint64
	ackLapsed                    atomic.Uint64 // acks left out: their lease lapsed first
	ackRefused                   atomic.Uint64
	emptyAckIDs, duplicateAckIDs atomic.Uint64
	missingMessages              atomic.Uint64
	ackFinal                     atomic.Int64 // Acking is acked − ackFinal
	mu                           sync.Mutex
	lastErr                      error
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
	// The settled before received, the final acks before the acks: a
	// message counted in between shows in the larger figure only, so
	// Unsettled and Acking are never negative.
	ackFinal, lapsed, refused := c.ackFinal.Load(), c.ackLapsed.Load(), c.ackRefused.Load()
	var by [Expired + 1]uint64
	for o := range by {
		by[o] = c.settled[o].Load()
	}
	acked, nacked := by[Ack], by[Nack]+by[NackAfter]
	received := c.received.Load()
	return Stats{
		Received:        received,
		Redelivered:     c.redelivered.Load(),
		Acked:           acked - lapsed - refused,
		Nacked:          nacked,
		NoOps:           by[NoOp],
		Expired:         by[Expired] + lapsed,
		AckRefused:      refused,
		Unsettled:       int64(received - acked - nacked - by[NoOp] - by[Expired]),
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
// linked through the messages themselves (Message.reg, prev, next) over
// regShards locks: joined on receipt, left on settle. It allocates
// nothing, and a settled message points at no other, so one held for long
// keeps only its own data alive.
type registry struct {
	shards [regShards]regShard
	next   atomic.Uint32 // where the next batch starts spreading
}

const regShards = 16

type regShard struct {
	mu     sync.Mutex
	head   *Message
	closed bool
	_      [48]byte // one cache line each
}

// add links a response's messages, one lock per shard for the batch;
// false once the registry is closed (those linked are unlinked as they
// settle).
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

// remove unlinks m if it is linked.
func (r *registry) remove(m *Message) {
	sh := m.reg
	if sh == nil {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case m.prev != nil:
		m.prev.next = m.next
	case sh.head == m:
		sh.head = m.next
	default:
		return
	}
	if m.next != nil {
		m.next.prev = m.prev
	}
	m.prev, m.next = nil, nil
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
		if !m.Settled() {
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
// (AckResult.Get). errors.Is tells the kind; status.Code(err) is the
// RPC's status code.
type AckError struct {
	AckID string // the message's ack id
	// Reason is the server's per-ack-id reason, if it gave one, such as
	// "PERMANENT_FAILURE_INVALID_ACK_ID" for an expired ack id.
	Reason string
	Kind   error // ErrAckRefused, ErrAckRetriesExhausted or ErrClosed
	Err    error // the RPC's error; nil when the source was closed first
}

// Kinds of AckError.
var (
	// ErrAckRefused: the server refused the ack id for good.
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
