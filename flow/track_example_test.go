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
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// EagerTrack as the source's receipt step: every message is leased the
// moment it is decoded, however long it then waits for the slow stage
// behind it, and its Ack ends the lease once the ack is final.
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

	ext, err := flow.NewExtender(client, flow.ExtenderConfig{StreamAckDeadline: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	src, err := source.Subscribe(client, source.Config{Subscription: sub, StreamAckDeadline: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	process := operators.ParallelMap(2, func(_ context.Context, m *source.Message) (*source.Message, error) {
		return m, nil // the handler; leases are extended meanwhile
	})

	acked := 0
	err = pipeline.FromContext(ctx, src.With(flow.EagerTrack(ext, 0))).
		Via(process).
		To(pipeline.ForEach(func(ctx context.Context, m *source.Message) error {
			m.Ack()
			if acked++; acked == 3 {
				cancel()
			}
			return nil
		}))
	_ = src.Close(context.Background()) // flushes the acks: the leases end
	fmt.Println("cancelled:", errors.Is(err, context.Canceled), "acked:", acked, "leases held:", ext.Stats().Leases)
	// Output: cancelled: true acked: 3 leases held: 0
}

// A Tracker can also run as a stage of its own, here inside a go-streams
// graph like every stage: it leases what it receives at once, and hands it
// on on demand.
func ExampleTracker() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	_, _ = srv.CreateTopic(ctx, "topic")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic"})
	ext, err := flow.NewExtender(pubsubpb.NewSubscriberClient(srv.ClientConn()), flow.ExtenderConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()

	tracker := flow.EagerTrack(ext, 10)
	graph := pipeline.Streams[*source.Message, *source.Message](func(g *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewPassThrough()).Via(pipeline.NewStreamsFlow(g, tracker))
	}, pipeline.StreamsOptions[*source.Message]{})

	msgs := []*source.Message{{AckID: "a1", Subscription: sub}, {AckID: "a2", Subscription: sub}, {AckID: "a3", Subscription: sub}}
	n := 0
	err = pipeline.From(pipeline.Slice(msgs...)).Via(graph).To(pipeline.ForEach(func(context.Context, *source.Message) error {
		n++
		return nil
	}))
	fmt.Println(err, n, "messages through,", ext.Stats().Leases, "leases held")
	for _, m := range msgs {
		m.NoOp() // settling ends the lease
	}
	fmt.Println(ext.Stats().Leases, "leases held")
	// Output:
	// <nil> 3 messages through, 3 leases held
	// 0 leases held
}
