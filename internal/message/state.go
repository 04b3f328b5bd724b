// Package message is the plumbing of a received message (source.Message):
// its outcome, the settle path it is bound to, and what the stages that
// hold it (a lease, a flow permit) must give back when it settles. Users
// never reach it: source registers the accessor (Of) and binds each
// message when it decodes it; flow and the Subscriber use it.
package message

import (
	"sync/atomic"
	"time"

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

// Path is a message's one settle path (its source's). Settle is called
// exactly once per message, on the goroutine that set the outcome, after
// every Holder's Settled; it calls State.Done once the server no longer
// counts the message (at once, or when the ack or nack is final).
type Path interface {
	Settle(m any, o uint32, delay time.Duration)
}

// Holder is a stage that took something for a message (a lease, a flow
// permit) and gives it back when the message settles: Settled once the
// outcome is set, Done once the server no longer counts the message (its
// ack or nack is final, or its deadline passed), with the time that
// became known (the caller reads the clock once for a whole batch). Both
// are called exactly once, in that order, and must not block.
type Holder interface {
	Settled(m any, o uint32)
	Done(m any, now time.Time)
}

// HoldNode is one Holder on a message's list; the holder provides it (one
// slab per batch), so attaching costs no allocation per message.
type HoldNode struct {
	h    Holder
	next *HoldNode
}

// sealed ends a settled message's hold list: nothing attaches after it.
var sealed = new(HoldNode)

// receiving ends the list of holders staged while the message is in its
// source's receipt (BeginReceipt … EndReceipt).
var receiving = new(HoldNode)

// State is the plumbing part of a message.
type State struct {
	// Size is the encoded size flow control counts.
	Size int
	// Path is set once, when the source decodes the message, before any
	// other goroutine can see it; nil for a message built by hand.
	Path Path
	// Clock is the clock of the source that decoded the message (set with
	// Path), which the deadline checks read; nil: time.Now.
	Clock *Clock
	// Acks is the acknowledger of the source that decoded the message (set
	// with Path; nil for a message built by hand): its client and
	// subscription are the message's own, where its acks and its lease
	// extensions go.
	Acks *ack.Acknowledger
	// Trace is the span state of a traced message (nil otherwise).
	Trace *Trace

	outcome atomic.Uint32
	doneRun atomic.Bool // Done ran
	// deadline is when the server releases the message as far as the
	// client knows (unix nanoseconds): receipt plus the stream ack
	// deadline, then each confirmed extension's send time plus its
	// seconds. Past it the server may give the message out again.
	deadline atomic.Int64
	// lapse is deadline less its margin (Margin): from then on an outcome
	// is an expiry, and the message is not handed on.
	lapse atomic.Int64
	holds atomic.Pointer[HoldNode]
	done  *HoldNode // the hold list, kept for Done once sealed
	// staged is the list of holders attached during the message's
	// receipt, ended by receiving; nil outside it. Only the goroutine that
	// decodes the message touches it, before the message is handed on, so
	// attaching there costs no atomic operation; EndReceipt moves the list
	// onto holds with one.
	staged *HoldNode
	handed atomic.Uint64 // 0: not handed off; else the hand-off's owner
	owner  atomic.Uint64 // the source run that handed it on (0: none yet)
}

var of func(any) *State

// Register sets the accessor Of uses; package source calls it once.
func Register(f func(any) *State) { of = f }

// Of returns m's plumbing; m must be a *source.Message.
func Of(m any) *State { return of(m) }

// Outcome is the outcome set so far (Pending if none).
func (st *State) Outcome() uint32 { return st.outcome.Load() }

// SettleMargin is how long before its server deadline a message can
// still be acked (or nacked): an ack made later would reach the server
// after the deadline, when the message may already be someone else's. A
// message settled within it is expired instead. A working lease keeps the
// deadline further away than that; only a lapsing one gets this close.
const SettleMargin = time.Second

// Margin is the settle margin of a deadline length long: SettleMargin, or
// a quarter of a shorter lease (test servers allow leases of 1 s).
func Margin(length time.Duration) time.Duration { return min(SettleMargin, length/4) }

// Settle sets outcome o if none is set yet; the one call that does tells
// every Holder (Settled), then the Path. It reports whether this call set
// the outcome. Lock-free: one compare-and-swap decides. A user's outcome
// (ack, nack, no-op) made within SettleMargin of the server deadline, or
// after it, becomes Expired, and Settle reports false.
func (st *State) Settle(m any, o uint32, delay time.Duration) bool {
	if o == Pending {
		return false
	}
	if o != Expired {
		if d := st.lapse.Load(); d != 0 && st.Clock.Now() >= d {
			st.Settle(m, Expired, 0)
			return false
		}
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

// Done tells every Holder that the server no longer counts m, as of now.
// It runs once, after Settle; later calls do nothing.
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

// Hold puts h on m's list, using n (the caller's storage), so that h
// hears when m settles. If m has already settled it reports false and h is
// told at once (Settled, then Done): nothing it took can leak.
//
// During the message's receipt (between BeginReceipt and EndReceipt, on
// the goroutine that runs them) it only stages n: EndReceipt attaches the
// staged holders at once, or tells them if m settled meanwhile.
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
			h.Settled(m, st.outcome.Load())
			h.Done(m, time.Now())
			return false
		}
		n.next = head
		if st.holds.CompareAndSwap(head, n) {
			return true
		}
	}
}

// BeginReceipt starts the message's receipt: until EndReceipt, Hold
// stages holders without an atomic operation. The source calls it when
// it decodes the message, before any other goroutine can reach it except
// through a settle (which EndReceipt then catches up with).
func (st *State) BeginReceipt() { st.staged = receiving }

// EndReceipt ends the receipt on the goroutine that began it: the staged
// holders join the hold list in one compare-and-swap, in the order they
// were staged (newest first, as Hold would have put them), or, if m has
// settled meanwhile, each is told at once (Settled, then Done), as Hold
// does after a settle.
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
			o, now := st.outcome.Load(), time.Now()
			for n := list; n != receiving; {
				next := n.next
				n.next = nil
				n.h.Settled(m, o)
				n.h.Done(m, now)
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
// returns false. A settled message has none (its holders were told).
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
// list before n (a node Hold put there): the nodes older than n never
// change, so this is safe whatever else happens to m.
func (st *State) HeldBefore(n *HoldNode, f func(Holder) bool) bool {
	for p := n.next; p != nil && p != receiving; p = p.next {
		if p != sealed && f(p.h) {
			return true
		}
	}
	return false
}

// MarkHandedOff records that m left its source for processing, naming
// the owner (a non-zero id); false if it was already marked.
func (st *State) MarkHandedOff(owner uint64) bool { return st.handed.CompareAndSwap(0, owner) }

// HandedOffBy is the owner given to MarkHandedOff (0: not handed off).
func (st *State) HandedOffBy() uint64 { return st.handed.Load() }

// SetOwner records the source run that handed m on.
func (st *State) SetOwner(run uint64) { st.owner.Store(run) }

// Owner is the source run that handed m on (0: none yet).
func (st *State) Owner() uint64 { return st.owner.Load() }

// Deadline is when the server releases m as far as the client knows (zero
// when no one has told: a message built by hand).
func (st *State) Deadline() time.Time {
	if d := st.deadline.Load(); d != 0 {
		return time.Unix(0, d)
	}
	return time.Time{}
}

// DeadlineNanos is Deadline in unix nanoseconds (0: unknown).
func (st *State) DeadlineNanos() int64 { return st.deadline.Load() }

// SetDeadline records a new server deadline, of a lease length long: at
// confirmed extension.
func (st *State) SetDeadline(t time.Time, length time.Duration) {
	st.lapse.Store(t.Add(-Margin(length)).UnixNano())
	st.deadline.Store(t.UnixNano())
}

// LapseAt is when m stops being settleable (its deadline less its margin;
// zero when no deadline is known).
func (st *State) LapseAt() time.Time {
	if d := st.lapse.Load(); d != 0 {
		return time.Unix(0, d)
	}
	return time.Time{}
}

// Lapsed reports whether m's server deadline is less than SettleMargin
// away (or past) at now: too late for an ack or nack to reach the server
// in time.
func (st *State) Lapsed(now time.Time) bool {
	d := st.lapse.Load()
	return d != 0 && now.UnixNano() >= d
}

// ExpireIfLate settles m as Expired when its server deadline is less than
// SettleMargin away (or past) at now: the server may give it out again
// before a handler could settle it, so it must not reach one. It reports whether m is settled (now or
// before).
func (st *State) ExpireIfLate(m any, now time.Time) bool {
	if st.Outcome() != Pending {
		return true
	}
	if st.Lapsed(now) {
		st.Settle(m, Expired, 0)
		return true
	}
	return false
}

// ExpireIfLateNow is ExpireIfLate at the time m's Clock reads now (read
// only if m has a deadline and no outcome).
func (st *State) ExpireIfLateNow(m any) bool {
	if st.Outcome() != Pending {
		return true
	}
	if d := st.lapse.Load(); d != 0 && st.Clock.Now() >= d {
		st.Settle(m, Expired, 0)
		return true
	}
	return false
}
