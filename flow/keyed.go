package flow

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/ring"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// KeyedGate is a FlowGate that gives each key (a tenant, say: an
// attribute of the message, or any function of it) a fair share of its
// budget, as an application-level budget among consumers that share one
// subscription, which server-side flow control cannot tell apart.
//
// While several keys wait, each may hold at most its share — the budget
// divided by the keys that hold or wait for messages — so one busy key
// cannot take the whole budget while the others wait; the keys that are
// behind are admitted first, in turn. Room a key does not use is lent to
// the others: a key alone may take the whole budget.
//
// It is a standalone eager stage (one goroutine): it receives while it
// holds fewer than MaxWaiting messages, waiting or admitted, counts a message
// against the budget when it admits it, and hands admitted messages on
// in the order it admitted them. Each message's settle path gives its
// permit back. Put it behind the source (or behind the Subscriber's
// Source, whose own budget still bounds what the client holds); messages
// waiting for their key's share wait here, leased if the source leases on
// receipt.
type KeyedGate struct {
	// MaxWaiting bounds the messages the stage holds, waiting for their
	// key's turn or admitted and not yet handed on (0: stage.DefaultBound).
	// It is what the gate can be fair among: make it larger than the
	// budget (the upstream budget, say), so a flood on one key cannot
	// hide the other keys' messages upstream.
	MaxWaiting int
	// Logger receives the one warning about a buffer before the stage
	// (nil: slog.Default()).
	Logger *slog.Logger

	fc   *FlowControl
	key  func(*source.Message) string
	late lateWarning
}

// KeyedFlowGate returns a KeyedGate on fc that shares it among the keys
// key gives (ByAttribute("tenant"), say).
func KeyedFlowGate(fc *FlowControl, key func(*source.Message) string) *KeyedGate {
	return &KeyedGate{fc: fc, key: key}
}

// ByAttribute keys a message by its attribute name ("" when it has none).
func ByAttribute(name string) func(*source.Message) string {
	return func(m *source.Message) string { return m.Attributes[name] }
}

var _ stage.Flow[*source.Message, *source.Message] = (*KeyedGate)(nil)

// keyState is one key's share: what it holds (settle paths decrement
// it) and what waits for admission.
type keyState struct {
	held    atomic.Int64
	waiting *ring.Ring[*source.Message]
	active  bool // on the turn list
}

// keyedPermit is a permit that also counts against its key.
type keyedPermit struct {
	permit
	k *keyState
}

func (p *keyedPermit) Settled(m any, o uint32) {
	p.k.held.Add(-1)
	p.permit.Settled(m, o)
}

// Run starts the stage's goroutine under g and returns its output.
func (kg *KeyedGate) Run(g *stage.Group, in <-chan *source.Message) <-chan *source.Message {
	out := make(chan *source.Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		r := &keyedRun{kg: kg, keys: map[string]*keyState{}, ready: ring.New[*source.Message](16)}
		defer r.dropAll()
		return r.loop(ctx, in, out)
	})
	return out
}

// keyedRun is one run's state, on the stage's goroutine only.
type keyedRun struct {
	kg      *KeyedGate
	keys    map[string]*keyState
	turns   []*keyState // keys with messages waiting, in turn order
	waiting int         // messages waiting over all keys
	ready   *ring.Ring[*source.Message]
}

func (r *keyedRun) bound() int { return cmpOr(r.kg.MaxWaiting, stage.DefaultBound) }

func (r *keyedRun) loop(ctx context.Context, in <-chan *source.Message, out chan<- *source.Message) error {
	fc := r.kg.fc
	for {
		wake := r.admit()
		if in == nil && r.waiting == 0 && r.ready.Len() == 0 {
			return nil
		}
		var recv <-chan *source.Message
		if in != nil && r.waiting+r.ready.Len() < r.bound() {
			recv = in
		}
		var send chan<- *source.Message
		var head *source.Message
		for r.ready.Len() > 0 && expireIfLate(r.ready.Front()) {
			r.ready.Pop() // settled while it waited: nothing to hand on
		}
		if r.ready.Len() > 0 {
			send, head = out, r.ready.Front()
		}
		if wake == nil && r.waiting > 0 {
			wake = fc.Wake()
		}
		select {
		case m, ok := <-recv:
			if !ok {
				in = nil
				continue
			}
			r.kg.late.check(r.kg.Logger, m, "flow.KeyedFlowGate", "put the gate right after the source, or after the Subscriber's Source, so waiting messages are leased")
			r.enqueue(m)
		case send <- head:
			r.ready.Pop()
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *keyedRun) enqueue(m *source.Message) {
	name := r.kg.key(m)
	k := r.keys[name]
	if k == nil {
		k = &keyState{waiting: ring.New[*source.Message](4)}
		r.keys[name] = k
	}
	k.waiting.Push(m)
	r.waiting++
	if !k.active {
		k.active = true
		r.turns = append(r.turns, k)
	}
}

// admit admits waiting messages while the budget has room, keys below
// their share first, in turn; a key at or over its share is admitted only
// when no key below it waits (its room is lent). It returns a channel
// to wait on when the budget stopped it (nil otherwise).
func (r *keyedRun) admit() <-chan struct{} {
	fc := r.kg.fc
	for r.waiting > 0 {
		k := r.next()
		m := k.waiting.Front()
		if expireIfLate(m) {
			r.pop(k)
			continue
		}
		if !r.acquire(k, m) {
			// Fetch Wake, then try once more: a release in between is
			// not missed.
			wake := fc.Wake()
			if !r.acquire(k, m) {
				return wake
			}
		}
		r.pop(k)
		r.ready.Push(m)
	}
	return nil
}

// next picks the key to admit from: the first in turn below its share,
// else the first in turn.
func (r *keyedRun) next() *keyState {
	share := r.share()
	for i, k := range r.turns {
		if k.held.Load() < share {
			// Its turn passes: it goes to the back.
			r.turns = append(append(r.turns[:i:i], r.turns[i+1:]...), k)
			return k
		}
	}
	k := r.turns[0]
	r.turns = append(r.turns[1:], k)
	return k
}

// share is each active key's fair share of the message budget: the
// budget divided among the keys that wait or hold messages (at least 1).
func (r *keyedRun) share() int64 {
	max := r.kg.fc.MaxMessages()
	if max <= 0 {
		return 1 << 62
	}
	active := int64(0)
	for name, k := range r.keys {
		switch {
		case k.active || k.held.Load() > 0:
			active++
		default:
			delete(r.keys, name) // idle: forget it
		}
	}
	return max / max64(active, 1)
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// acquire counts m against the budget and its key, if there is room.
func (r *keyedRun) acquire(k *keyState, m *source.Message) bool {
	fc := r.kg.fc
	size := int64(max(m.Size(), 0))
	if !fc.TryAcquire(int(size)) {
		return false
	}
	k.held.Add(1)
	p := &keyedPermit{permit: permit{fc: fc, size: size}, k: k}
	message.Of(m).Hold(m, &p.node, p)
	return true
}

func (r *keyedRun) pop(k *keyState) {
	k.waiting.Pop()
	r.waiting--
	if k.waiting.Len() == 0 {
		k.active = false
		for i, t := range r.turns {
			if t == k {
				r.turns = append(r.turns[:i], r.turns[i+1:]...)
				break
			}
		}
	}
}

// dropAll nacks what the stage still holds when it stops.
func (r *keyedRun) dropAll() {
	for r.ready.Len() > 0 {
		r.ready.Pop().Nack()
	}
	for _, k := range r.keys {
		for k.waiting.Len() > 0 {
			k.waiting.Pop().Nack()
		}
	}
}
