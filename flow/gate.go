package flow

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Gate is FlowGate's stage: it counts each message against its
// FlowControl the moment it receives it, so Outstanding is exactly what
// the client holds however slow downstream is, and it does not receive
// while the budget is spent, so backpressure reaches upstream. Standalone
// it holds at most MaxMessages admitted messages (stage.DefaultBound when
// unlimited) and hands them on in order. One FlowControl may back several
// gates; for shares per key see KeyedGate.
type Gate struct {
	// Logger receives the warnings: once about a buffer before the stage,
	// once per stream a server sent past its grant (nil: slog.Default()).
	Logger *slog.Logger

	fc   *FlowControl
	late lateWarning
}

// FlowGate returns a Gate on fc.
func FlowGate(fc *FlowControl) *Gate { return &Gate{fc: fc} }

// Receipt is the gate's part when fused into a source (source.Step): it
// counts on receipt, and its FlowControl is the streams' budget.
func (gt *Gate) Receipt(message.Key) source.Receipt {
	return source.Receipt{Receive: gt.receive, Budget: laneBudget{gt.fc}}
}

func (gt *Gate) receive(lane int, ms []*source.Message) {
	if over, first := gt.fc.receive(lane, ms); first {
		cmp.Or(gt.Logger, slog.Default()).Warn("pubsubflow: the server sent a stream more than its flow-control grant; the client stops reading at its budget",
			"over", over, "maxMessages", gt.fc.maxMessages, "maxBytes", gt.fc.maxBytes)
	}
}

// Run starts the standalone stage's goroutine under g and returns its
// output.
func (gt *Gate) Run(g *stage.Group, in <-chan *source.Message) <-chan *source.Message {
	kg := &KeyedGate{keyedBase: gt, MaxWaiting: int(gt.fc.maxMessages)} // one key, admitted in order
	return kg.run(g, in, false)
}

// KeyedGate is a FlowGate that gives each key (a tenant, say) a fair share
// of its budget, for consumers sharing one subscription that server-side
// flow control cannot tell apart. While several keys hold or wait for
// messages, each may hold at most the budget divided among them (at least
// one): keys below their share are served first, in turn, and room a key
// does not use is lent to the others. A message costs O(1) however many
// keys: a choice passes over at most the keys at their share.
//
// Fused after source.Subscribe (write the other receipt steps before it),
// every message is counted on receipt, and the source hands its messages
// to the gate at once (Sequence), which hands them on one at a time by the
// keys' shares, so a small tenant's message goes next however many a big
// one has waiting. Standalone, it counts a message when it admits it.
type KeyedGate struct {
	// MaxWaiting bounds the messages the gate holds, waiting for their
	// key's turn or admitted and not handed on (0: stage.DefaultBound). It
	// is what the gate can be fair among: make it at least the budget.
	MaxWaiting int

	*keyedBase // FlowGate's receipt step, budget and Logger
	key        func(*source.Message) string
}

// keyedBase names the embedded Gate so that only its Logger is exported.
type keyedBase = Gate

// KeyedFlowGate returns a KeyedGate on fc that shares it among the keys
// key gives (ByAttribute("tenant"), say).
func KeyedFlowGate(fc *FlowControl, key func(*source.Message) string) *KeyedGate {
	return &KeyedGate{keyedBase: &Gate{fc: fc}, key: key}
}

// ByAttribute keys a message by its attribute name ("" when it has none).
func ByAttribute(name string) func(*source.Message) string {
	return func(m *source.Message) string { return m.Attributes[name] }
}

// Run starts the standalone stage's goroutine under g and returns its
// output.
func (kg *KeyedGate) Run(g *stage.Group, in <-chan *source.Message) <-chan *source.Message {
	return kg.run(g, in, false)
}

// Receipt is FlowGate's receipt step with the hand-off by the keys'
// shares (Sequence), which takes in what the source hands on.
func (kg *KeyedGate) Receipt(k message.Key) source.Receipt {
	r := kg.keyedBase.Receipt(k)
	r.Sequence = func(g *stage.Group, in <-chan *source.Message) <-chan *source.Message {
		return kg.run(g, in, true)
	}
	return r
}

// run starts a run of the gate; fused, the source counted every message
// on receipt already.
func (kg *KeyedGate) run(g *stage.Group, in <-chan *source.Message, fused bool) <-chan *source.Message {
	r := &gateRun{kg: kg, fused: fused, bound: stage.DefaultBound, keys: map[string]*keyState{},
		turns: stage.NewRing[*keyState](16), ready: stage.NewRing[*source.Message](16)}
	if kg.MaxWaiting > 0 {
		r.bound = kg.MaxWaiting
	}
	r.stage, r.fix = "flow.FlowGate", "put FlowGate right after source.Subscribe (pipeline.From(src).Via(flow.FlowGate(fc))) so it counts on receipt and stops the streams"
	if kg.key != nil {
		r.stage, r.fix = "flow.KeyedFlowGate", "put the gate right after source.Subscribe (pipeline.From(src).Via(flow.KeyedFlowGate(fc, key))) so it counts on receipt and is fair among all the client holds"
	}
	out := make(chan *source.Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		defer r.dropAll()
		return r.loop(ctx, in, out)
	})
	return out
}

// keyState is one key's share, on the run's goroutine but for n.
type keyState struct {
	// n counts the key's messages waiting and held (settle paths take
	// theirs off): the key is active while it is above 0.
	n       atomic.Int64
	active  *atomic.Int64 // the run's count of active keys
	waiting *stage.Ring[*source.Message]
	queued  bool // on the turn list (it has messages waiting)
}

func (k *keyState) held() int64 { return k.n.Load() - int64(k.waiting.Len()) }

// release takes one message off the key: settled, or dropped unadmitted.
func (k *keyState) release() {
	if k.n.Add(-1) == 0 {
		k.active.Add(-1)
	}
}

// gateRun is one run of a gate, on its goroutine only (but for active,
// which settle paths lower). A FlowGate's run has one key, and receives
// only while the budget has room.
type gateRun struct {
	kg         *KeyedGate
	fused      bool
	bound      int
	stage, fix string // for the late warning
	keys       map[string]*keyState
	swept      int                    // len(keys) after the last sweep
	active     atomic.Int64           // keys with messages waiting or held
	turns      *stage.Ring[*keyState] // keys with messages waiting, in turn order
	waiting    int                    // messages waiting over all keys
	ready      *stage.Ring[*source.Message]
	timer      *time.Timer // the offered head's lapse
}

func (r *gateRun) loop(ctx context.Context, in <-chan *source.Message, out chan<- *source.Message) error {
	for {
		wake := r.admit()
		if r.dropLapsed() {
			continue // admit the next
		}
		if in == nil && r.waiting == 0 && r.ready.Len() == 0 {
			return nil
		}
		var recv <-chan *source.Message
		if in != nil && r.waiting+r.ready.Len() < r.bound && (r.kg.key != nil || r.waiting == 0 && r.room(&wake)) {
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
				r.kg.late.check(r.kg.Logger, m, r.stage, r.fix)
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

// room reports whether FlowGate's budget has room to receive; when not,
// wake is the channel fetched before the last check (no lost wake-up).
func (r *gateRun) room(wake *<-chan struct{}) bool {
	if r.kg.fc.Room() {
		return true
	}
	*wake = r.kg.fc.Wake()
	return r.kg.fc.Room()
}

// handOffSlack is how early the gate expires a message it offers before
// the message lapses, so that a hand-off at the instant of the lapse
// cannot hand on a copy the server may give out again.
const handOffSlack = time.Millisecond

// dropLapsed drops the messages to hand on first that are settled, or
// lapse within handOffSlack (expiring them), and reports whether it did.
func (r *gateRun) dropLapsed() bool {
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
func (r *gateRun) lapse(head *source.Message) <-chan time.Time {
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

func (r *gateRun) enqueue(m *source.Message) {
	var name string
	if r.kg.key != nil {
		name = r.kg.key(m)
	}
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

// newKey returns a new key's state. The keys that neither wait nor hold
// are forgotten once the map has doubled since the last sweep, O(1) per
// key amortized: only the run adds to a key's n, so one at 0 stays there.
func (r *gateRun) newKey() *keyState {
	if len(r.keys) >= 2*r.swept+64 {
		for name, k := range r.keys {
			if k.n.Load() == 0 {
				delete(r.keys, name)
			}
		}
		r.swept = len(r.keys)
	}
	return &keyState{active: &r.active, waiting: stage.NewRing[*source.Message](2)}
}

// admit admits waiting messages (standalone, while the budget has room;
// fused, one when there is none to hand on), keys below their share
// first, in turn; a key at or over its share only when no key below it
// waits. It returns a channel to wait on when the budget stopped it.
func (r *gateRun) admit() <-chan struct{} {
	for r.waiting > 0 && (!r.fused || r.ready.Len() == 0) {
		k := r.next()
		m := k.waiting.Front()
		if message.Of(m).ExpireIfLateNow(m) {
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

// next takes off the turn list the first key in turn below its share,
// else the first. The keys it passes over go to the back, in order.
func (r *gateRun) next() *keyState {
	share := int64(math.MaxInt64)
	if limit := r.kg.fc.maxMessages; limit > 0 {
		share = max(limit/max(r.active.Load(), 1), 1)
	}
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
func (r *gateRun) take(k *keyState) {
	k.waiting.Pop()
	r.waiting--
	if k.waiting.Len() > 0 {
		r.turns.Push(k)
	} else {
		k.queued = false
	}
}

// acquire counts m against its key and, standalone, against the budget if
// it has room; else it returns the channel to wait on, fetched before a
// second try so that a release in between is not missed.
func (r *gateRun) acquire(k *keyState, m *source.Message) <-chan struct{} {
	p := &permit{key: k}
	if !r.fused {
		fc, size := r.kg.fc, max(m.Size(), 0)
		if !fc.tryAcquire(size) {
			wake := fc.Wake()
			if !fc.tryAcquire(size) {
				return wake
			}
		}
		p.fc, p.size = fc, int64(size)
	}
	message.Of(m).Hold(m, &p.node, p)
	return nil
}

// dropAll nacks what the run still holds when it stops.
func (r *gateRun) dropAll() {
	if r.timer != nil {
		r.timer.Stop()
	}
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
