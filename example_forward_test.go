package pubsubflow_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func ExampleForward() {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, err := srv.CreateTopic(context.Background(), "relayed")
	if err != nil {
		log.Fatal(err)
	}
	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	// Received messages (here built by hand; a Subscriber's Source gives
	// them) are acked once their transformed copy is published, nacked if
	// that publish fails.
	in := &pubsubflow.Message{Data: []byte("order 42")}
	upper := func(m *pubsubflow.Message) *publisher.Message {
		return &publisher.Message{Data: append([]byte("relayed "), m.Data...)}
	}
	err = pipeline.From(pipeline.Slice(in)).To(pubsubflow.Forward(p, upper, 100))
	fmt.Println(err, string(in.Data), in.Outcome())
	// Output: <nil> order 42 ack
}
