package flow_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// A chain built by hand from source.Subscribe, EagerTrack and FlowGate gets
// the same exact accounting as a Subscriber when the tracker and the gate
// run as receipt steps — on the stream's goroutine, where each response
// is decoded — and the gate is the source's budget: every message is bound,
// leased and counted before it waits anywhere, the stream reads only while
// there is room, and a reconnecting stream asks the server only for the
// room that is left.
func ExampleGate_Receive() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "billing", Topic: "orders"})
	for i := range 5 {
		_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "order %d", i)})
	}
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())

	ext, err := flow.NewExtender(client, sub, flow.ExtenderConfig{})
	if err != nil {
		log.Fatal(err)
	}
	fc := flow.NewFlowControl(3, 0) // at most 3 messages held
	acks, err := ack.New(client, sub, ack.Config{Flow: fc, OnAcked: func(ids []string) { ext.ReleaseAcked(sub, ids) }})
	if err != nil {
		log.Fatal(err)
	}
	settler := sink.NewSettler(acks, fc, ext) // the one settle path
	settler.ReleaseAfterAck = true
	tracker := &flow.Tracker{Extender: ext}
	gate := &flow.Gate{Flow: fc, Pending: func() int64 { return acks.Stats().Unacked }}

	src, err := source.Subscribe(client, source.Config{
		Subscription:           sub,
		MaxOutstandingMessages: fc.MaxMessages(),
		Receipt: func(stream int, ms []*message.Message) {
			for _, m := range ms {
				message.Bind(m, settler)
			}
			tracker.Receive(stream, ms) // EagerTrack's step: the leases
			gate.Receive(stream, ms)    // FlowGate's step: the permits
		},
		Budget: gate,
		Ready:  tracker.Ready,
	})
	if err != nil {
		log.Fatal(err)
	}
	var most atomic.Int64 // the most messages held, seen by the workers
	process := operators.ParallelMap(2, func(_ context.Context, m *message.Message) (*message.Message, error) {
		for cur := fc.Outstanding(); cur > most.Load(); {
			most.CompareAndSwap(most.Load(), cur)
		}
		return m, nil
	}, operators.Options[*message.Message, *message.Message]{})
	done := 0
	ackAll := pipeline.ForEach(func(_ context.Context, m *message.Message) error {
		m.Ack() // through the settle path: permit and lease released, ack batched
		if done++; done == 5 {
			cancel()
		}
		return nil
	})
	_ = pipeline.FromContext(ctx, src).Via(process).To(ackAll)
	_ = acks.Close(context.Background())
	_ = ext.Close()
	fmt.Println("processed:", done, "never held more than 3:", most.Load() <= 3, "still held:", fc.Outstanding())
	// Output: processed: 5 never held more than 3: true still held: 0
}
