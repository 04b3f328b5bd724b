package flow

import (
	"context"
	"testing"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// BenchmarkGate measures messages/s through a FlowGate whose consumer acks
// at once (permit taken on receipt, released by the settle path).
func BenchmarkGate(b *testing.B) {
	fc := NewFlowControl(1000, 100<<20)
	rel := &releaser{fc: fc}
	msgs := make([]*message.Message, b.N)
	for i := range msgs {
		msgs[i] = newMsg(i, 200)
		message.Bind(msgs[i], rel)
	}
	g := stage.NewGroup(context.Background())
	in := make(chan *message.Message, 128)
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

// BenchmarkFlowControlAcquireRelease is one permit taken and returned with
// the per-message record.
func BenchmarkFlowControlAcquireRelease(b *testing.B) {
	fc := NewFlowControl(1000, 100<<20)
	m := newMsg(1, 200)
	b.ReportAllocs()
	for b.Loop() {
		fc.AcquireMessage(m)
		fc.ReleaseMessage(m)
	}
}
