package flow

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// KeyedGate is a FlowGate that gives each key (a tenant, say: an
// attribute of the message, or any function of it) a fair share of its
// budget, as an application-level budget among consumers that share one
// subscription, which server-side flow control cannot tell apart.
//
// While several keys wait, each may hold at most its share — the budget
// divided by the keys that hold or wait for messages, at least one — so
// one busy key cannot take the whole budget while the others wait; the
// keys that are behind are taken first, in turn. Room a key does not use
// is lent to the others: a key alone may take the whole budget. Each
// message costs O(1), however many keys: a choice passes over at most the
// keys at their share, which hold the budget between them.
//
// Written right after source.Subscribe in a pipeline (after EagerTrack,
// say), it is fused into the source like FlowGate (a source.Step, with a
// Sequence hook): every message is counted on
// receipt and the streams read and ask the server only for the room the
// budget leaves, so the client holds at most the budget; the source hands
// its messages to the gate at once, and the gate hands them on, one at a
// time, each from the first key in turn below its share (write the other
// receipt steps before it: what follows it runs as stages). A key's share
// there bounds what it holds downstream (handed on, unsettled), so a
// small tenant's message is handed on next however many a big one has
// waiting.
//
// Anywhere else it is a standalone eager stage (one goroutine): it
// receives while it holds fewer than MaxWaiting messages, waiting or
// admitted, counts a message against the budget when it admits it, and
// hands admitted messages on in the order it admitted them. A message that
// reaches it long after receipt (LateAfter) means a buffer sits before
// it, which it cannot be fair among: it says so once, at Warn.
//
// Each message's settle path gives its permit back. Logger (the field of
// the FlowGate it embeds; nil: slog.Default()) receives the warnings: the
// one about a buffer before the stage, and a server's over-grant.
type KeyedGate struct {
	// MaxWaiting bounds the messages the stage holds, waiting for their
	// key's turn or admitted and not yet handed on (0: stage.DefaultBound).
	// It is what the gate can be fair among: make it at least the budget
	// (and, standalone, the upstream budget), so a flood on one key cannot
	// hide the other keys' messages upstream.
	MaxWaiting int

	keyedBase // the receipt step and budget, as FlowGate's (Logger)
	key       func(*source.Message) string
	late      lateWarning
}

// keyedBase is the FlowGate a KeyedGate is fused as.
type keyedBase = Gate

// KeyedFlowGate returns a KeyedGate on fc that shares it among the keys
// key gives (ByAttribute("tenant"), say).
func KeyedFlowGate(fc *FlowControl, key func(*source.Message) string) *KeyedGate {
	return &KeyedGate{keyedBase: Gate{fc: fc}, key: key}
}

// ByAttribute keys a message by its attribute name ("" when it has none).
func ByAttribute(name string) func(*source.Message) string {
	return func(m *source.Message) string { return m.Attributes[name] }
}

var (
	_ source.Step                                  = (*KeyedGate)(nil)
	_ stage.Flow[*source.Message, *source.Message] = (*KeyedGate)(nil)
)

// keyState is one key's share, on the stage's goroutine but for n.
type keyState struct {
	// n counts the key's messages waiting and held (settle paths take
	// theirs off): the key is active while it is above 0.
	n       atomic.Int64
	active  *atomic.Int64 // the run's count of active keys
	waiting *stage.Ring[*source.Message]
	queued  bool // on the turn list (it has messages waiting)
}

// held is what the key holds: admitted and not settled.
func (k *keyState) held() int64 { return k.n.Load() - int64(k.waiting.Len()) }

// release takes one message off the key: settled, or dropped unadmitted.
func (k *keyState) release() {
	if k.n.Add(-1) == 0 {
		k.active.Add(-1)
	}
}

// keyedPermit counts a message against its key and, standalone, against
// the budget (fused, the source's permit from Receive does).
type keyedPermit struct {
	permit // fc nil when fused
	k      *keyState
}

func (p *keyedPermit) Settled(m any, o uint32) {
	p.k.release()
	if p.fc != nil {
		p.permit.Settled(m, o)
	}
}

func (p *keyedPermit) Done(m any, now time.Time) {
	if p.fc != nil {
		p.permit.Done(m, now)
	}
}

// Run starts the standalone stage's goroutine under g and returns its
// output.
func (kg *KeyedGate) Run(g *stage.Group, in <-chan *source.Message) <-chan *source.Message {
	return kg.run(g, in, false)
}

// Receipt is the gate's part when fused into a source (source.Step):
// FlowGate's, and the hand-off by the keys' shares (Sequence), which
// takes in what the source hands on, counted on receipt already.
func (kg *KeyedGate) Receipt(k message.Key) source.Receipt {
	r := kg.keyedBase.Receipt(k)
	r.Sequence = func(g *stage.Group, in <-chan *source.Message) <-chan *source.Message { return kg.run(g, in, true) }
	return r
}

func (kg *KeyedGate) run(g *stage.Group, in <-chan *source.Message, fused bool) <-chan *source.Message {
	out := make(chan *source.Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		r := &keyedRun{kg: kg, fused: fused, keys: map[string]*keyState{},
			turns: stage.NewRing[*keyState](16), ready: stage.NewRing[*source.Message](16)}
		defer r.dropAll()
		defer func() {
			if r.timer != nil {
				r.timer.Stop()
			}
		}()
		return r.loop(ctx, in, out)
	})
	return out
}

// keyedRun is one run's state, on the stage's goroutine only (but for
// active, which settle paths lower).
type keyedRun struct {
	kg      *KeyedGate
	fused   bool // the source counted every message on receipt
	keys    map[string]*keyState
	swept   int                    // len(keys) after the last sweep
	free    []*keyState            // forgotten keys to reuse
	active  atomic.Int64           // keys with messages waiting or held
	turns   *stage.Ring[*keyState] // keys with messages waiting, in turn order
	waiting int                    // messages waiting over all keys
	ready   *stage.Ring[*source.Message]
	timer   *time.Timer // the offered head's lapse
}

func (r *keyedRun) bound() int { return cmpOr(r.kg.MaxWaiting, stage.DefaultBound) }

func (r *keyedRun) loop(ctx context.Context, in <-chan *source.Message, out chan<- *source.Message) error {
	for {
		wake := r.admit()
		if r.dropLapsed() {
			continue // admit the next
		}
		if in == nil && r.waiting == 0 && r.ready.Len() == 0 {
			return nil
		}
		var recv <-chan *source.Message
		if in != nil && r.waiting+r.ready.Len() < r.bound() {
			recv = in
		}
		var send chan<- *source.Message
		var head *source.Message
		if r.ready.Len() > 0 {
			send, head = out, r.ready.Front()
		}
		select {
		case m, ok := <-recv:
			if !ok {
				in = nil
				continue
			}
			if !r.fused {
				r.kg.late.check(r.kg.Logger, m, "flow.KeyedFlowGate", "put the gate right after source.Subscribe (pipeline.From(src).Via(flow.KeyedFlowGate(fc, key))) so it counts on receipt and is fair among all the client holds")
			}
			r.enqueue(m)
		case send <- head:
			r.ready.Pop()
		case <-r.lapse(head): // dropLapsed expires it
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handOffSlack is how early the gate expires a message it offers before
// the message lapses, so a hand-off and a lapse at the same instant cannot
// hand on a copy as it lapses (as the source's hand-off does).
const handOffSlack = time.Millisecond

// dropLapsed drops the messages to hand on first that are settled, or
// lapse within handOffSlack (expiring them): the server may give them out
// again. It reports whether it dropped any.
func (r *keyedRun) dropLapsed() bool {
	dropped := false
	for r.ready.Len() > 0 {
		m := r.ready.Front()
		if !message.Of(m).ExpireIfLate(m, time.Now().Add(handOffSlack)) {
			break
		}
		r.ready.Pop()
		dropped = true
	}
	return dropped
}

// lapse returns a channel that fires when head, offered downstream, is
// about to lapse (nil without a head or a known deadline).
func (r *keyedRun) lapse(head *source.Message) <-chan time.Time {
	if head == nil {
		return nil
	}
	d := message.Of(head).LapseAt()
	if d.IsZero() {
		return nil
	}
	wait := time.Until(d) - handOffSlack
	if r.timer == nil {
		r.timer = time.NewTimer(wait)
	} else {
		r.timer.Reset(wait)
	}
	return r.timer.C
}

func (r *keyedRun) enqueue(m *source.Message) {
	name := r.kg.key(m)
	k := r.keys[name]
	if k == nil {
		k = r.newKey()
		r.keys[name] = k
	}
	if k.n.Add(1) == 1 {
		r.active.Add(1)
	}
	k.waiting.Push(m)
	r.waiting++
	if !k.queued {
		k.queued = true
		r.turns.Push(k)
	}
}

// newKey returns a key's state, reusing one forgotten: the keys that
// neither wait nor hold are forgotten once the map has doubled since the
// last sweep, O(1) per key amortized. (Only the stage adds to a key's n,
// so one at 0 stays there, and nothing refers to it any more.)
func (r *keyedRun) newKey() *keyState {
	if len(r.keys) >= 2*r.swept+64 {
		for name, k := range r.keys {
			if k.n.Load() == 0 {
				delete(r.keys, name)
				if len(r.free) < 2*r.bound()+64 { // what a sweep frees
					r.free = append(r.free, k)
				}
			}
		}
		r.swept = len(r.keys)
	}
	if n := len(r.free); n > 0 {
		k := r.free[n-1]
		r.free = r.free[:n-1]
		return k
	}
	return &keyState{active: &r.active, waiting: stage.NewRing[*source.Message](2)}
}

// admit admits waiting messages — standalone, while the budget has room;
// fused, one when there is none to hand on — keys below their share first,
// in turn; a key at or over its share is admitted only when no key below
// it waits (its room is lent). It returns a channel to wait on when the
// budget stopped it (nil otherwise).
func (r *keyedRun) admit() <-chan struct{} {
	for r.waiting > 0 && (!r.fused || r.ready.Len() == 0) {
		k := r.next()
		m := k.waiting.Front()
		if expireIfLate(m) {
			r.take(k)
			k.release() // it holds nothing
			continue
		}
		if wake := r.acquire(k, m); wake != nil {
			r.turns.PushFront(k) // it keeps its turn
			return wake
		}
		r.take(k)
		r.ready.Push(m)
	}
	return nil
}

// next takes the key to admit from off the turn list: the first in turn
// below its share, else the first in turn. The keys it passes over go to
// the back, in order (after a full round the list is as it was).
func (r *keyedRun) next() *keyState {
	share := r.share()
	for range r.turns.Len() {
		k := r.turns.Pop()
		if k.held() < share {
			return k
		}
		r.turns.Push(k)
	}
	return r.turns.Pop()
}

// take removes k's first waiting message; k goes to the back of the turn
// list while it has more.
func (r *keyedRun) take(k *keyState) {
	k.waiting.Pop()
	r.waiting--
	if k.waiting.Len() > 0 {
		r.turns.Push(k)
	} else {
		k.queued = false
	}
}

// share is each active key's fair share of the message budget: the
// budget divided among the keys that wait or hold messages, at least 1.
func (r *keyedRun) share() int64 {
	limit := r.kg.fc.MaxMessages()
	if limit <= 0 {
		return math.MaxInt64
	}
	return max(limit/max(r.active.Load(), 1), 1)
}

// acquire counts m against its key and, standalone, against the budget
// if it has room; else it returns the channel to wait on.
func (r *keyedRun) acquire(k *keyState, m *source.Message) <-chan struct{} {
	p := &keyedPermit{k: k}
	if !r.fused {
		fc := r.kg.fc
		size := int64(max(m.Size(), 0))
		if !fc.tryAcquire(int(size)) {
			// Fetch Wake, then try once more: a release in between is
			// not missed.
			wake := fc.Wake()
			if !fc.tryAcquire(int(size)) {
				return wake
			}
		}
		p.fc, p.size = fc, size
	}
	message.Of(m).Hold(m, &p.node, p)
	return nil
}

// dropAll nacks what the stage still holds when it stops.
func (r *keyedRun) dropAll() {
	for r.ready.Len() > 0 {
		r.ready.Pop().Nack()
	}
	for r.turns.Len() > 0 {
		k := r.turns.Pop()
		for k.waiting.Len() > 0 {
			k.waiting.Pop().Nack()
		}
	}
}
