package pubsubflow

import (
	"context"
	"math"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// book is the Subscriber's own receipt step, after EagerTrack and
// FlowGate: it counts processing for Stats and the ack latency metric,
// and settles with OnShutdown what a draining subscriber did not hand on.
type book struct {
	s *Subscriber
	// onHandOff: a message counts as processing once it leaves the source
	// (a custom pipeline); else once a handler takes it (Run).
	onHandOff bool
}

var _ source.Step = (*book)(nil)

// settledFirst marks a message settled before any hand-off, so a late
// hand-off mark fails and the two counters stay exact.
const settledFirst = math.MaxUint64

// Receipt declares the book's hooks (source.Step).
func (b *book) Receipt(message.Key) source.Receipt {
	return source.Receipt{Receive: b.receive, HandOff: b.handOff, Unsent: b.unsent}
}

func (b *book) receive(_ int, ms []*Message) {
	if len(ms) > 0 {
		b.s.own(ms[0])
		b.s.told.check(b.s, ms[0])
	}
	nodes := make([]message.HoldNode, len(ms))
	for i, m := range ms {
		message.Of(m).Hold(m, &nodes[i], b)
	}
}

// Settled counts a handed-off message out of processing.
func (b *book) Settled(mi any, o uint32) {
	m := mi.(*Message)
	s := b.s
	if o == message.Ack && s.tel.ackLatency != nil {
		s.tel.observeAck(time.Since(m.ReceiveTime))
	}
	// Nearly always handed off already: a load, not a failing CAS.
	if st := message.Of(m); st.HandedOffBy() != 0 || !st.MarkHandedOff(settledFirst) {
		s.c.settledHanded.Add(1)
	}
}

func (b *book) Done(any, time.Time) {}

// handOff sees each batch as it leaves the source: while draining, the
// messages get the OnShutdown outcome instead of going on.
func (b *book) handOff(_ context.Context, ms []*Message) []*Message {
	if b.s.life.draining() {
		b.unsent(ms)
		return nil
	}
	if b.onHandOff {
		for _, m := range ms {
			b.markHanded(m)
		}
	}
	return ms
}

// unsent settles what the source will not hand on with OnShutdown while
// draining (the source nacks the rest).
func (b *book) unsent(ms []*Message) {
	s := b.s
	if !s.life.draining() {
		return
	}
	for _, m := range ms {
		sink.Settle(m, s.cfg.OnShutdown, s.cfg.ShutdownNackDelay)
	}
}

func (b *book) markHanded(m *Message) {
	if message.Of(m).MarkHandedOff(1) {
		b.s.c.handed.Add(1)
	}
}
