package proptest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// gateChecks is the CI default of TestGateCountsOnReceipt's cases.
const gateChecks = 200

// TestGateCountsOnReceipt drives a standalone FlowGate on a FlowControl
// with random message sizes and limits, a slow consumer, settles in
// processing, and leases that expire while messages wait in the gate, and
// checks after every step (invariant 2):
//   - every message the gate took from upstream and that is not settled
//     holds its permit, but the one waiting for a permit; Outstanding and
//     OutstandingBytes are exactly what those messages hold;
//   - Outstanding ≤ the message limit, OutstandingBytes ≤ the byte limit
//     but for one oversize message alone;
//   - a message waits for a permit only while the budget cannot take it;
//   - every message is settled once, and at the end every permit came
//     back: Acquired == Released, and nothing is outstanding or held for
//     the server.
func TestGateCountsOnReceipt(t *testing.T) {
	check(t, gateChecks, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := newGateModel(rt)
			defer g.teardown()
			rt.Repeat(map[string]func(*rapid.T){
				"":       g.check,
				"Offer":  g.offer,
				"Take":   g.take,
				"Settle": g.settle,
				"Expire": g.expire,
			})
			g.finish(rt)
		})
	})
}

type gateModel struct {
	maxMsgs, maxBytes int64
	fc                *flow.FlowControl
	g                 *stage.Group
	stop              context.CancelFunc
	out               <-chan *source.Message
	quota             chan struct{}
	producerDone      chan struct{}
	msgs              []*source.Message // every message made, by index
	next              int

	mu      sync.Mutex // guards the fields below; never held while waiting
	sent    int        // messages the gate took from upstream: msgs[:sent]
	taken   map[*source.Message]bool
	settles map[*source.Message]int
}

// Settle is the hand-made messages' settle path (message.Path): it counts,
// and the server forgets the message at once (Done).
func (g *gateModel) Settle(mi any, _ uint32, _ time.Duration) {
	m := mi.(*source.Message)
	g.mu.Lock()
	g.settles[m]++
	g.mu.Unlock()
	message.Of(m).Done(m)
}

func newGateModel(t *rapid.T) *gateModel {
	maxMsgs := rapid.Int64Range(1, 6).Draw(t, "maxMessages")
	return newGateModelWith(maxMsgs, rapid.SampledFrom([]int64{flow.Unlimited, 100, 400, 1000}).Draw(t, "maxBytes"))
}

func newGateModelWith(maxMsgs, maxBytes int64) *gateModel {
	g := &gateModel{
		maxMsgs:      maxMsgs,
		maxBytes:     maxBytes,
		quota:        make(chan struct{}, 1000),
		producerDone: make(chan struct{}),
		taken:        map[*source.Message]bool{},
		settles:      map[*source.Message]int{},
	}
	g.fc = flow.NewFlowControl(g.maxMsgs, g.maxBytes)
	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	g.g = stage.NewGroup(ctx)
	in := make(chan *source.Message)
	g.out = flow.FlowGate(g.fc).Run(g.g, in)
	go g.produce(ctx, in)
	return g
}

func (g *gateModel) produce(ctx context.Context, in chan<- *source.Message) {
	defer close(g.producerDone)
	defer close(in)
	i := 0
	for range g.quota {
		g.mu.Lock()
		m := g.msgs[i]
		g.mu.Unlock()
		select {
		case in <- m:
			g.mu.Lock()
			g.sent++
			g.mu.Unlock()
			i++
		case <-ctx.Done():
			return
		}
	}
}

func (g *gateModel) offer(t *rapid.T) {
	g.doOffer(rapid.SliceOfN(rapid.IntRange(1, 600), 1, 5).Draw(t, "sizes"))
}

func (g *gateModel) doOffer(sizes []int) {
	for _, size := range sizes {
		m := &source.Message{ID: strconv.Itoa(g.next), AckID: "ack-" + strconv.Itoa(g.next)}
		st := message.Of(m)
		st.Size, st.Path = size, g
		g.next++
		g.mu.Lock()
		g.msgs = append(g.msgs, m)
		g.mu.Unlock()
		g.quota <- struct{}{}
	}
	synctest.Wait()
}

func (g *gateModel) take(t *rapid.T) {
	n := rapid.IntRange(1, 5).Draw(t, "n")
	for range n {
		synctest.Wait()
		select {
		case m, ok := <-g.out:
			if !ok {
				return
			}
			g.mu.Lock()
			g.taken[m] = true
			g.mu.Unlock()
		default:
			return
		}
	}
	synctest.Wait()
}

// settle acks one message in processing.
func (g *gateModel) settle(t *rapid.T) {
	var open []*source.Message
	g.mu.Lock()
	for _, m := range g.msgs {
		if g.taken[m] && !m.Settled() {
			open = append(open, m)
		}
	}
	g.mu.Unlock()
	if len(open) == 0 {
		return
	}
	rapid.SampledFrom(open).Draw(t, "message").Ack()
	synctest.Wait()
}

// expire settles a message that the gate holds or that still waits
// upstream, as the lease extender does when a lease lapses.
func (g *gateModel) expire(t *rapid.T) {
	var open []*source.Message
	g.mu.Lock()
	for _, m := range g.msgs {
		if !g.taken[m] && !m.Settled() {
			open = append(open, m)
		}
	}
	g.mu.Unlock()
	if len(open) == 0 {
		return
	}
	m := rapid.SampledFrom(open).Draw(t, "message")
	message.Of(m).Settle(m, message.Expired, 0)
	synctest.Wait()
}

func (g *gateModel) check(t *rapid.T) {
	synctest.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	out, bytes := g.fc.Outstanding(), g.fc.OutstandingBytes()
	if out > g.maxMsgs {
		t.Fatalf("invariant 2: Outstanding %d > limit %d", out, g.maxMsgs)
	}
	if g.maxBytes > 0 && bytes > g.maxBytes && out > 1 {
		t.Fatalf("invariant 2: OutstandingBytes %d > limit %d with %d messages out", bytes, g.maxBytes, out)
	}
	// The gate admits in order, one at a time: only the last message it
	// took may wait for its permit.
	var holding, holdingBytes int64
	var waiting *source.Message
	for i, m := range g.msgs[:g.sent] {
		if m.Settled() {
			continue
		}
		if g.taken[m] || i < g.sent-1 {
			holding++
			holdingBytes += int64(m.Size())
			continue
		}
		waiting = m
	}
	if waiting != nil && out == holding+1 {
		holding++ // it got its permit
		holdingBytes += int64(waiting.Size())
		waiting = nil
	}
	if out != holding || bytes != holdingBytes {
		t.Fatalf("invariant 2: Outstanding %d (%d bytes), but %d unsettled messages (%d bytes) hold permits", out, bytes, holding, holdingBytes)
	}
	if waiting != nil && fits(g.fc, int64(waiting.Size())) {
		t.Fatalf("invariant 2: message %s (%d bytes) waits for a permit the budget has (outstanding %d, %d bytes)", waiting.ID, waiting.Size(), out, bytes)
	}
	for m, n := range g.settles {
		if n != 1 {
			t.Fatalf("invariant 3: message %s settled %d times", m.ID, n)
		}
	}
}

// finish stops the gate, settles what is left and checks that every
// permit came back.
func (g *gateModel) finish(t *rapid.T) {
	g.stop()
	synctest.Wait()
	for range g.out {
	}
	_ = g.g.Wait()
	g.mu.Lock()
	msgs := append([]*source.Message(nil), g.msgs...)
	g.mu.Unlock()
	for _, m := range msgs {
		m.Ack() // no-op for the settled ones; the gate nacked what it held
	}
	st := g.fc.Stats()
	if st.Outstanding != 0 || st.OutstandingBytes != 0 || st.Acquired != st.Released || st.ServerHeld != 0 {
		t.Fatalf("invariant 3: permits did not come back: %+v", st)
	}
}

func (g *gateModel) teardown() {
	g.stop()
	close(g.quota)
	<-g.producerDone
	_ = g.g.Wait()
}

// fits reports whether a message of size would get a permit from fc now:
// fewer than its messages out, and its bytes room (or none out).
func fits(fc *flow.FlowControl, size int64) bool {
	if m := fc.MaxMessages(); m > 0 && fc.Outstanding() >= m {
		return false
	}
	b, out := fc.MaxBytes(), fc.OutstandingBytes()
	return b <= 0 || out == 0 || out+size <= b
}
