package flow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// release is the smallest settle path: it returns the flow permits.
type release struct{ fc *flow.FlowControl }

func (r release) Settle(m *message.Message, _ message.Outcome, _ time.Duration) {
	r.fc.ReleaseMessage(m)
}

func ExampleFlowGate() {
	fc := flow.NewFlowControl(3, 0)
	g := stage.NewGroup(context.Background())

	in := make(chan *message.Message, 10)
	for i := range 10 {
		m := &message.Message{AckID: fmt.Sprint(i)}
		message.Bind(m, release{fc}) // a subscriber binds its settle path on receipt
		in <- m
	}
	close(in)

	out := flow.FlowGate(fc).Run(g, in)
	first := <-out
	// The gate took permits for what it received, not only for what
	// downstream took, and stopped at the limit.
	for fc.Outstanding() < 3 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("outstanding:", fc.Outstanding())

	first.Ack()
	n := 1
	for m := range out {
		m.Ack()
		n++
	}
	_ = g.Wait()
	fmt.Println("processed:", n, "outstanding:", fc.Outstanding())
	// Output:
	// outstanding: 3
	// processed: 10 outstanding: 0
}
