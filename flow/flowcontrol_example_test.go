package flow_test

import (
	"fmt"

	"github.com/pubsubflow/pubsubflow/flow"
)

// A FlowControl's plain counting (the Publisher's): every TryAcquire that
// succeeds is paired with one Release. Received messages are counted by a
// FlowGate instead, and their settle path gives the permits back.
func ExampleNewFlowControl() {
	fc := flow.NewFlowControl(2, 1<<20) // 2 messages, 1 MiB

	fmt.Println(fc.TryAcquire(512), fc.TryAcquire(512), fc.TryAcquire(512))
	fmt.Println(fc.Outstanding(), fc.OutstandingBytes(), fc.Room())
	fc.ReleaseN(1, 512)
	fmt.Println(fc.Outstanding(), fc.OutstandingBytes(), fc.Room())
	// Output:
	// true true false
	// 2 1024 false
	// 1 512 true
}
