package sink_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/sink"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

func ExampleAcknowledge() {
	ctx := context.Background()
	srv, _ := pubsubtest.NewServer()
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "billing", Topic: topic})
	for _, d := range []string{"ok", "bad", "ok"} {
		_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte(d)})
	}
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())

	// Shared by the whole subscriber: budget, acknowledger, settle path.
	fc := flow.NewFlowControl(flow.DefaultMaxMessages, flow.DefaultMaxBytes)
	acks, _ := ack.New(client, sub, ack.Config{Flow: fc})
	settle := sink.NewSettler(acks, fc, nil)

	// A stand-in for the stream: bind each message on receipt.
	resp, _ := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 3})
	in := make(chan *message.Message, len(resp.ReceivedMessages))
	for _, rm := range resp.ReceivedMessages {
		m := message.FromReceived(rm, sub, nil, time.Now())
		message.Bind(m, settle)
		in <- m
	}
	close(in)

	g := stage.NewGroup(ctx)
	gated := flow.FlowGate(fc).Run(g, in)
	// The handler: a failure is applied by policy (nack), success is left
	// to the sink (ack).
	handled := make(chan *message.Message)
	g.Go(func(ctx context.Context) error {
		defer close(handled)
		for m := range gated {
			if string(m.Data) == "bad" {
				sink.Apply(m, errors.New("cannot bill"), sink.Policy{})
			}
			handled <- m
		}
		return nil
	})
	err := sink.Acknowledge(sink.Policy{}).Run(g, handled)
	_ = g.Wait()
	_ = acks.Close(ctx)

	st := srv.SubscriptionStats(sub)
	fmt.Println(err, "acked:", st.Acked, "nacked:", st.Nacked, "outstanding permits:", fc.Outstanding())
	// Output: <nil> acked: 2 nacked: 1 outstanding permits: 0
}

func ExampleApply() {
	m := &message.Message{AckID: "a"}
	policy := sink.Policy{OnFailure: message.NackAfter, NackDelay: 30 * time.Second}
	sink.Apply(m, errors.New("downstream unavailable"), policy)
	fmt.Println(m.Outcome(), message.Delay(m))
	// Output: nack-after 30s
}

func ExampleNewSettler() {
	fc := flow.NewFlowControl(10, 0)
	settle := sink.NewSettler(nil, fc, nil) // no acknowledger: settles locally only

	m := &message.Message{AckID: "a"}
	message.Bind(m, settle)
	fc.AcquireMessage(m)
	fmt.Println("before:", fc.Outstanding())
	m.Ack()
	fmt.Println("after:", fc.Outstanding())
	// Output:
	// before: 1
	// after: 0
}
