package flow_test

import (
	"context"
	"fmt"
	"log"
	"runtime"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// A budget of 4 shared by tenants: a flood of "big" messages queued first
// does not keep "small" out. While both wait, each holds at most half the
// budget, and they are admitted in turn, so small's four are all handed on
// before big's last ones.
func ExampleKeyedFlowGate() {
	fc := flow.NewFlowControl(4, flow.Unlimited)
	in := make(chan *source.Message, 12)
	for i := range 8 {
		in <- &source.Message{ID: fmt.Sprint("big-", i), Attributes: map[string]string{"tenant": "big"}}
	}
	for i := range 4 {
		in <- &source.Message{ID: fmt.Sprint("small-", i), Attributes: map[string]string{"tenant": "small"}}
	}
	close(in)
	g := stage.NewGroup(context.Background())
	gate := flow.KeyedFlowGate(fc, flow.ByAttribute("tenant"))
	out := gate.Run(g, in)
	handed := map[string]int{}
	smallDone := 0
	for m := range out {
		// Hold the first permit until the gate has read all twelve (a
		// consumer faster than the gate's reads could otherwise see big's
		// eight before small's first arrived: nothing waits to be fair to).
		for len(in) > 0 {
			runtime.Gosched()
		}
		handed[m.Attributes["tenant"]]++
		if handed["small"] == 4 && smallDone == 0 {
			smallDone = handed["big"] + 4
		}
		m.Ack() // settling gives the permit back
	}
	_ = g.Wait()
	fmt.Println(handed, "- small all served among the first 10:", smallDone <= 10)
	// Output: map[big:8 small:4] - small all served among the first 10: true
}

// Written right after the source, the keyed gate is fused into it: every
// message is counted on receipt, the stream asks the server only for the
// budget's room, so the client never holds more than the budget, and the
// gate hands on what the client holds by the tenants' shares.
func ExampleKeyedFlowGate_afterSource() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "billing", Topic: "orders"})
	for i := range 20 {
		tenant := map[bool]string{true: "big", false: "small"}[i%5 != 0]
		_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "order %d", i), Attributes: map[string]string{"tenant": tenant}})
	}
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	ext, err := flow.NewExtender(client, flow.ExtenderConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ext.Close()
	src, err := source.Subscribe(client, source.Config{Subscription: sub})
	if err != nil {
		log.Fatal(err)
	}
	fc := flow.NewFlowControl(4, flow.Unlimited) // at most 4 messages held
	gate := flow.KeyedFlowGate(fc, flow.ByAttribute("tenant"))

	handed := map[string]int{}
	most := int64(0)
	ackAll := pipeline.ForEach(func(_ context.Context, m *source.Message) error {
		most = max(most, fc.Outstanding())
		handed[m.Attributes["tenant"]]++
		m.Ack()
		if handed["big"]+handed["small"] == 20 {
			cancel()
		}
		return nil
	})
	_ = pipeline.FromContext(ctx, src).Via(flow.EagerTrack(ext, 0), gate).To(ackAll)
	_ = src.Close(context.Background())
	fmt.Println(handed, "never held more than 4:", most <= 4, "server's most outstanding:", srv.SubscriptionStats(sub).MaxOutstanding)
	// Output: map[big:16 small:4] never held more than 4: true server's most outstanding: 4
}
