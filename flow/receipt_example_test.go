package flow_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// A chain built by hand from source.Subscribe, EagerTrack and FlowGate gets
// the same exact accounting as a Subscriber when the tracker and the gate
// run as the source's receipt steps, where each response is decoded: every
// message is leased and counted before it waits anywhere, the gate is the
// source's budget (the stream reads only while there is room), and each
// message's Ack gives back its lease and its permit and sends the ack.
func ExampleFlowGate_withEagerTrack() {
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

	ext, err := flow.NewExtender(client, flow.ExtenderConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	fc := flow.NewFlowControl(3, flow.Unlimited) // at most 3 messages held
	src, err := source.Subscribe(client, source.Config{Subscription: sub})
	if err != nil {
		log.Fatal(err)
	}
	src = src.With(flow.EagerTrack(ext, 0), flow.FlowGate(fc)) // the receipt steps

	var most atomic.Int64 // the most messages held, seen by the workers
	process := operators.ParallelMap(2, func(_ context.Context, m *source.Message) (*source.Message, error) {
		for cur := fc.Outstanding(); cur > most.Load(); {
			most.CompareAndSwap(most.Load(), cur)
		}
		return m, nil
	})
	done := 0
	ackAll := pipeline.ForEach(func(_ context.Context, m *source.Message) error {
		m.Ack() // permit and lease given back, ack sent by the source
		if done++; done == 5 {
			cancel()
		}
		return nil
	})
	_ = pipeline.FromContext(ctx, src).Via(process).To(ackAll)
	_ = src.Close(context.Background()) // flushes the acks
	fmt.Println("processed:", done, "never held more than 3:", most.Load() <= 3,
		"still held:", fc.Outstanding(), "leases:", ext.Stats().Leases)
	// Output: processed: 5 never held more than 3: true still held: 0 leases: 0
}
