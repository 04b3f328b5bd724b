// Package message is the plumbing of a received message (source.Message):
// its outcome, the settle path it is bound to, its lease deadline, and
// what the stages that hold it (a lease, a flow permit) must give back.
// Users never reach it; source registers the accessor (Of).
//
// A message moves through these states:
//
//   - receiving: the source decodes it (BeginReceipt) and binds Path,
//     Clock, Acks and the first deadline, on the stream's goroutine,
//     before any other goroutine sees it. Its receipt steps' Holds are
//     only staged; EndReceipt, on the same goroutine, attaches them with
//     one compare-and-swap. These plain fields are ordered by the hand-off
//     (a channel send) that publishes the message.
//   - held: any goroutine may Hold, extend the lease (SetDeadline) or set
//     the outcome. Settle's compare-and-swap on the outcome decides the
//     one winner; from a deadline less its Margin on, every outcome is
//     Expired.
//   - settled: the winner seals the hold list, tells each Holder
//     (Settled), then the Path, on its own goroutine. Later Holds are told
//     at once.
//   - done: the Path calls Done (once) when the server no longer counts
//     the message: its ack or nack is final, or its deadline passed.
package message

import (
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/ack"
)

// Outcome values; source.Outcome has the same numbering.
const (
	Pending uint32 = iota
	Ack
	Nack
	NackAfter
	NoOp
	Expired
)

// Path is a message's settle path (its source's): Settle runs once per
// message, after every Holder's Settled, and calls State.Done once the
// server no longer counts the message.
type Path interface {
	Settle(m any, o uint32, delay time.Duration)
}

// Holder is a stage that took something for a message (a lease, a flow
// permit): Settled once the outcome is set, then Done once the server no
// longer counts the message, each exactly once. Neither may block.
type Holder interface {
	Settled(m any, o uint32)
	Done(m any, now time.Time)
}

// HoldNode is one Holder on a message's list; the holder provides it (one
// slab per batch), so attaching allocates nothing.
type HoldNode struct {
	h    Holder
	next *HoldNode
}

var (
	sealed    = new(HoldNode) // ends a settled message's list
	receiving = new(HoldNode) // ends the list staged during the receipt
)

// Key is the argument of source.Step's Receipt: only this module can make
// one, so only a source calls a step's receipt hooks.
type Key struct{}

// State is the plumbing part of a message.
type State struct {
	// Size is the encoded size flow control counts.
	Size int
	// Path, Clock and Acks are the decoding source's (nil for a message
	// built by hand): its settle path, the clock of its deadline checks,
	// and the acknowledger its acks and lease extensions go to.
	Path  Path
	Clock *Clock
	Acks  *ack.Acknowledger
	// Trace is the span state of a traced message (nil otherwise).
	Trace *Trace

	outcome atomic.Uint32
	doneRun atomic.Bool
	// deadline is when the server releases the message as far as the
	// client knows (unix nanoseconds); lapse is deadline less its Margin.
	deadline, lapse atomic.Int64
	holds           atomic.Pointer[HoldNode]
	done            *HoldNode // the sealed hold list, for Done
	staged          *HoldNode // Holds during the receipt; nil outside it
	handed, owner   atomic.Uint64
}

var of func(any) *State

// Register sets the accessor Of uses; package source calls it once.
func Register(f func(any) *State) { of = f }

// Of returns m's plumbing; m must be a *source.Message.
func Of(m any) *State { return of(m) }

// Outcome is the outcome set so far (Pending if none).
func (st *State) Outcome() uint32 { return st.outcome.Load() }

// SettleMargin is how long before its server deadline a message can
// still be acked: a later ack would reach the server after the deadline,
// when the message may already be someone else's.
const SettleMargin = time.Second

// Margin is the settle margin of a lease length long: SettleMargin, or a
// quarter of a shorter lease (test servers allow leases of 1 s).
func Margin(length time.Duration) time.Duration { return min(SettleMargin, length/4) }

// Settle sets outcome o if none is set yet, tells every Holder, then the
// Path, and reports whether this call set it. A user's outcome made past
// the lapse (deadline less Margin) becomes Expired, and Settle reports
// false.
func (st *State) Settle(m any, o uint32, delay time.Duration) bool {
	if o == Pending || o != Expired && st.ExpireIfLateNow(m) {
		return false
	}
	if !st.outcome.CompareAndSwap(Pending, o) {
		return false
	}
	list := st.holds.Swap(sealed)
	for n := list; n != nil; n = n.next {
		n.h.Settled(m, o)
	}
	st.done = list
	if st.Path != nil {
		st.Path.Settle(m, o, delay)
	} else {
		st.Done(m)
	}
	return true
}

// Done tells every Holder that the server no longer counts m; it runs
// once, after Settle.
func (st *State) Done(m any) { st.DoneAt(m, time.Now()) }

// DoneAt is Done at a time the caller read (once for a batch).
func (st *State) DoneAt(m any, now time.Time) {
	if !st.doneRun.CompareAndSwap(false, true) {
		return
	}
	for n := st.done; n != nil; n = n.next {
		n.h.Done(m, now)
	}
	st.done = nil
}

// tell gives h what a settled message gives its holders, at once.
func (st *State) tell(m any, h Holder) {
	h.Settled(m, st.outcome.Load())
	h.Done(m, time.Now())
}

// Hold puts h on m's list in n (the caller's storage). If m has settled
// it reports false and tells h at once, so nothing h took can leak.
// During the receipt it only stages n.
func (st *State) Hold(m any, n *HoldNode, h Holder) bool {
	n.h = h
	if st.staged != nil {
		n.next = st.staged
		st.staged = n
		return true
	}
	for {
		head := st.holds.Load()
		if head == sealed {
			st.tell(m, h)
			return false
		}
		n.next = head
		if st.holds.CompareAndSwap(head, n) {
			return true
		}
	}
}

// BeginReceipt starts the receipt: until EndReceipt, Hold stages holders
// without an atomic operation.
func (st *State) BeginReceipt() { st.staged = receiving }

// EndReceipt puts the staged holders on the hold list in one
// compare-and-swap, newest first as Hold would, or tells each at once if
// m settled meanwhile.
func (st *State) EndReceipt(m any) {
	list := st.staged
	st.staged = nil
	if list == receiving || list == nil {
		return
	}
	tail := list
	for tail.next != receiving {
		tail = tail.next
	}
	for {
		head := st.holds.Load()
		if head == sealed {
			for n := list; n != receiving; {
				next := n.next
				n.next = nil
				st.tell(m, n.h)
				n = next
			}
			return
		}
		tail.next = head
		if st.holds.CompareAndSwap(head, list) {
			return
		}
	}
}

// Holders calls f for each Holder on m's list, newest first, until f
// returns false; a settled message has none.
func (st *State) Holders(f func(Holder) bool) {
	head := st.holds.Load()
	if head == sealed {
		return
	}
	for n := head; n != nil; n = n.next {
		if !f(n.h) {
			return
		}
	}
}

// HeldBefore reports whether a Holder for which f is true was put on m's
// list before n; the nodes older than n never change.
func (st *State) HeldBefore(n *HoldNode, f func(Holder) bool) bool {
	for p := n.next; p != nil && p != receiving; p = p.next {
		if f(p.h) {
			return true
		}
	}
	return false
}

// MarkHandedOff records that m left its source for processing, naming
// the owner (non-zero); false if it was already marked.
func (st *State) MarkHandedOff(owner uint64) bool { return st.handed.CompareAndSwap(0, owner) }

// HandedOffBy is the owner given to MarkHandedOff (0: not handed off).
func (st *State) HandedOffBy() uint64 { return st.handed.Load() }

// SetOwner records the source run that handed m on.
func (st *State) SetOwner(run uint64) { st.owner.Store(run) }

// Owner is the source run that handed m on (0: none yet).
func (st *State) Owner() uint64 { return st.owner.Load() }

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Deadline is when the server releases m as far as the client knows (zero
// when unknown: a message built by hand).
func (st *State) Deadline() time.Time { return unixTime(st.deadline.Load()) }

// DeadlineNanos is Deadline in unix nanoseconds (0: unknown).
func (st *State) DeadlineNanos() int64 { return st.deadline.Load() }

// SetDeadline records a new server deadline, of a lease length long.
func (st *State) SetDeadline(t time.Time, length time.Duration) {
	st.lapse.Store(t.Add(-Margin(length)).UnixNano())
	st.deadline.Store(t.UnixNano())
}

// LapseAt is when m stops being settleable (zero when unknown).
func (st *State) LapseAt() time.Time { return unixTime(st.lapse.Load()) }

// Lapsed reports whether m is past its lapse at now: too late for an ack
// or nack to reach the server in time.
func (st *State) Lapsed(now time.Time) bool {
	d := st.lapse.Load()
	return d != 0 && now.UnixNano() >= d
}

// ExpireIfLate settles m as Expired if it has lapsed at now, so that no
// handler gets a copy the server may give out again. It reports whether m
// is settled.
func (st *State) ExpireIfLate(m any, now time.Time) bool {
	if st.Outcome() == Pending && st.Lapsed(now) {
		st.Settle(m, Expired, 0)
	}
	return st.Outcome() != Pending
}

// ExpireIfLateNow is ExpireIfLate at m's Clock's now (read only if m has
// a deadline and no outcome).
func (st *State) ExpireIfLateNow(m any) bool {
	if d := st.lapse.Load(); d != 0 && st.Outcome() == Pending && st.Clock.Now() >= d {
		st.Settle(m, Expired, 0)
	}
	return st.Outcome() != Pending
}

// Clock tells the time in unix nanoseconds with one clock read (time.Now
// takes two): its wall time at creation plus the monotonic time since.
// Deadlines are seconds away and checked with SettleMargin to spare, so a
// wall-clock step shifts a check by the step, as it would with time.Now.
type Clock struct {
	base   time.Time
	baseNs int64
}

// NewClock returns a Clock that starts now.
func NewClock() *Clock {
	t := time.Now()
	return &Clock{base: t, baseNs: t.UnixNano()}
}

// Now is the time in unix nanoseconds. A nil Clock reads time.Now.
func (c *Clock) Now() int64 {
	if c == nil {
		return time.Now().UnixNano()
	}
	return c.baseNs + int64(time.Since(c.base))
}

// Trace is the span state of a message whose subscriber traces; other
// messages carry a nil pointer.
type Trace struct {
	// Subscribe is the "<subscription> subscribe" span, open from receipt
	// until the server confirmed the ack or nack, or the message expired.
	Subscribe trace.Span
	// Process is the "<subscription> process" span while the handler runs.
	Process atomic.Pointer[trace.Span]
	// Recording is whether Subscribe records, set before the message is
	// shared; a message that does not record gets no other span or event.
	Recording bool

	ended atomic.Bool
}

// End reports whether this call is the first to end the subscribe span
// (the settle path, the confirming RPC and Close may race).
func (t *Trace) End() bool { return t.ended.CompareAndSwap(false, true) }

// Ended reports whether End was called.
func (t *Trace) Ended() bool { return t.ended.Load() }
