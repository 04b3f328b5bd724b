package message_test

import (
	"fmt"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
)

type printSettler struct{}

func (printSettler) Settle(m *message.Message, o message.Outcome, d time.Duration) {
	fmt.Println("settle", m.AckID, o)
}

// The first outcome wins and reaches the settle path once.
func ExampleMessage_Ack() {
	m := &message.Message{AckID: "a1"}
	message.Bind(m, printSettler{})
	fmt.Println(m.Ack(), m.Nack(), m.Outcome())
	// Output:
	// settle a1 ack
	// true false ack
}
