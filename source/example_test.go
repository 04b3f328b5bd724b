package source_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// embedded starts an in-process server with a subscription holding n
// messages, every third of kind "order", and returns its client and the
// subscription's name.
func embedded(n int) (pubsubpb.SubscriberClient, string, func()) {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	topic, _ := srv.CreateTopic(ctx, "activity")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "activity", Topic: topic})
	for i := range n {
		kind := "click"
		if i%3 == 0 {
			kind = "order"
		}
		_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: fmt.Append(nil, i), Attributes: map[string]string{"kind": kind}})
	}
	return pubsubpb.NewSubscriberClient(srv.ClientConn()), sub, func() { _ = srv.Close() }
}

// A hand-built chain of the operators: EagerTrack and FlowGate written
// right after the source are fused into it (they lease and count each
// message where its response is decoded), then the user's stage, then the
// Acknowledge sink. Stop ends the streams; the pipeline finishes what it
// holds; Close flushes the acks.
func ExampleSubscribe() {
	client, sub, stop := embedded(30)
	defer stop()
	ext, err := flow.NewExtender(client, flow.ExtenderConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	src, err := source.Subscribe(client, source.Config{Subscription: sub})
	if err != nil {
		log.Fatal(err)
	}
	budget := flow.NewFlowControl(10, flow.Unlimited)

	var handled atomic.Int64
	work := operators.ParallelMap(4, func(_ context.Context, m *source.Message) (*source.Message, error) {
		if handled.Add(1) == 30 {
			src.Stop() // all in: end the streams
		}
		return m, nil
	})

	err = pipeline.From(src).
		Via(flow.EagerTrack(ext, 0), flow.FlowGate(budget), work).
		To(sink.Acknowledge(sink.Policy{}))
	if err := src.Close(context.Background()); err != nil {
		log.Fatal(err)
	}
	st := src.Stats()
	fmt.Println(err, handled.Load(), st.Acked, budget.Outstanding(), ext.Stats().Leases)
	// Output: <nil> 30 30 0 0
}

// A source split for fan-out: a go-streams Split sends orders and the
// other events down two branches, each with its own handler, merged back
// into one Acknowledge sink. Both branches are covered by the leases and
// the budget taken on receipt, however long they hold a message.
func ExampleSource_fanOut() {
	client, sub, stop := embedded(30)
	defer stop()
	ext, err := flow.NewExtender(client, flow.ExtenderConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	src, err := source.Subscribe(client, source.Config{Subscription: sub})
	if err != nil {
		log.Fatal(err)
	}
	var orders, events, total atomic.Int64
	done := func() {
		if total.Add(1) == 30 {
			src.Stop()
		}
	}
	fanOut := pubsubflow.Streams(func(g *stage.Group, in streams.Source) streams.Outlet {
		branches := gsflow.Split(in, func(m *source.Message) bool { return m.Attributes["kind"] == "order" })
		orderBranch := branches[0].Via(gsflow.NewMap(func(m *source.Message) *source.Message {
			orders.Add(1)
			done()
			return m
		}, 2))
		eventBranch := branches[1].Via(gsflow.NewMap(func(m *source.Message) *source.Message {
			events.Add(1)
			done()
			return m
		}, 1))
		return gsflow.Merge(orderBranch, eventBranch)
	}, pubsubflow.StreamsOptions{})

	err = pipeline.From(src).
		Via(flow.EagerTrack(ext, 0), flow.FlowGate(flow.NewFlowControl(10, flow.Unlimited)), fanOut).
		To(sink.Acknowledge(sink.Policy{}))
	_ = src.Close(context.Background())
	fmt.Println(err, "orders:", orders.Load(), "events:", events.Load(), "acked:", src.Stats().Acked)
	// Output: <nil> orders: 10 events: 20 acked: 30
}
