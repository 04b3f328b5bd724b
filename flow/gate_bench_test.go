package flow

import (
	"context"
	"testing"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// BenchmarkGate measures messages/s through a FlowGate whose consumer acks
// at once (permit taken on receipt, released by the settle path).
func BenchmarkGate(b *testing.B) {
	fc := NewFlowControl(1000, 100<<20)
	msgs := make([]*source.Message, b.N)
	for i := range msgs {
		msgs[i] = newMsg(i, 200)
	}
	g := stage.NewGroup(context.Background())
	in := make(chan *source.Message, 128)
	out := FlowGate(fc).Run(g, in)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for _, m := range msgs {
			in <- m
		}
		close(in)
	}()
	for m := range out {
		m.Ack()
	}
	b.StopTimer()
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkFlowControlReceive is the receipt step on a response of 100
// messages, then each message settled.
func BenchmarkFlowControlReceive(b *testing.B) {
	fc := NewFlowControl(Unlimited, Unlimited)
	const lane = 1
	laneBudget{fc}.Open(lane, 0, 0, nil)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		slab := make([]source.Message, 100)
		ms := make([]*source.Message, len(slab))
		for i := range slab {
			ms[i] = &slab[i]
			message.Of(ms[i]).Size = 200
		}
		b.StartTimer()
		fc.receive(lane, ms)
		for _, m := range ms {
			m.Ack()
		}
	}
}
