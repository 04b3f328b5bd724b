package flow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// A FlowGate running as a stage of its own (for a chain that does not
// start at source.Subscribe) takes a permit for every message it receives,
// not only for what downstream took, and stops receiving at the limit.
// Settling a message gives its permit back: there is nothing to pair.
func ExampleFlowGate() {
	fc := flow.NewFlowControl(3, flow.Unlimited)
	g := stage.NewGroup(context.Background())

	in := make(chan *source.Message, 10)
	for i := range 10 {
		in <- &source.Message{AckID: fmt.Sprint(i)}
	}
	close(in)

	out := flow.FlowGate(fc).Run(g, in)
	first := <-out
	for fc.Outstanding() < 3 { // the gate fills its budget on its own
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
