package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// EagerTrack sits right after the source: every message is tracked for
// lease extension the moment it arrives, however long it then waits for
// the slow stage behind it.
func ExampleEagerTrack() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "billing", Topic: "orders"})
	for i := range 3 {
		_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "order %d", i)})
	}
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())

	ext, err := flow.NewExtender(client, sub, flow.ExtenderConfig{StreamAckDeadline: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	src, err := source.Subscribe(client, source.Config{Subscription: sub, StreamAckDeadline: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	process := operators.ParallelMap(2, func(_ context.Context, m *message.Message) (*message.Message, error) {
		return m, nil // the handler; leases are extended meanwhile
	}, operators.Options[*message.Message, *message.Message]{})

	acked := 0
	err = pipeline.FromContext(ctx, src).
		Via(flow.EagerTrack(ext, 100), process).
		To(pipeline.ForEach(func(ctx context.Context, m *message.Message) error {
			// A Subscriber's settle path does this: ack, then release.
			if _, err := client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: []string{m.AckID}}); err != nil {
				return err
			}
			ext.Release(m, message.Ack)
			if acked++; acked == 3 {
				cancel()
			}
			return nil
		}))
	fmt.Println("cancelled:", errors.Is(err, context.Canceled), "acked:", acked, "leases held:", ext.Len())
	// Output: cancelled: true acked: 3 leases held: 0
}

// A Tracker (the struct form of EagerTrack, with Discard and Observe) can
// sit inside a go-streams graph like every stage.
func ExampleTracker() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	_, _ = srv.CreateTopic(ctx, "topic")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic"})
	ext, err := flow.NewExtender(pubsubpb.NewSubscriberClient(srv.ClientConn()), sub, flow.ExtenderConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()

	tracker := &flow.Tracker{Extender: ext, MaxBuffer: 10}
	graph := pipeline.Streams[*message.Message, *message.Message](func(g *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewPassThrough()).Via(pipeline.NewStreamsFlow(g, tracker))
	}, pipeline.StreamsOptions[*message.Message]{})

	msgs := []*message.Message{{AckID: "a1"}, {AckID: "a2"}, {AckID: "a3"}}
	n := 0
	err = pipeline.From(pipeline.Slice(msgs...)).Via(graph).To(pipeline.ForEach(func(context.Context, *message.Message) error {
		n++
		return nil
	}))
	fmt.Println(err, n, "messages through,", ext.Len(), "leases held")
	// Output: <nil> 3 messages through, 3 leases held
}
