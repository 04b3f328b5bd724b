package flow_test

import (
	"fmt"

	"github.com/pubsubflow/pubsubflow/flow"
)

// A FlowControl is a budget that gates count into (FlowGate, or
// KeyedFlowGate for shares per key): here 2 messages and 1 MiB, with
// nothing held yet. Each counted message's settle path gives its permit
// back (see ExampleFlowGate).
func ExampleNewFlowControl() {
	fc := flow.NewFlowControl(2, 1<<20)
	fmt.Println(fc.MaxMessages(), fc.MaxBytes(), fc.Outstanding(), fc.Room())
	// Output: 2 1048576 0 true
}
