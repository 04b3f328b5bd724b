package flow_test

import (
	"fmt"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

func ExampleNewFlowControl() {
	fc := flow.NewFlowControl(2, 1<<20) // 2 messages, 1 MiB

	m := &message.Message{AckID: "a"}
	message.SetSize(m, 512)
	fmt.Println(fc.AcquireMessage(m), fc.Outstanding(), fc.OutstandingBytes())

	// The settle path returns the permits, once.
	fmt.Println(fc.ReleaseMessage(m), fc.ReleaseMessage(m), fc.Outstanding())
	// Output:
	// true 1 512
	// true false 0
}
