package sink_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// Acknowledge ends a pipeline: a message that reaches it without an
// outcome gets the policy's OnSuccess. A stage reports a failure with
// Apply, which gives the message the policy's OnFailure — here a nack
// after a minute, so the server does not redeliver it at once. Either
// way the message's lease and permit are given back, and the ack or nack
// is batched by its source.
func ExampleAcknowledge() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "invoices")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "invoices", Topic: topic})
	for i := range 9 {
		_, _ = srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: fmt.Append(nil, i)})
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

	policy := sink.Policy{OnFailure: source.NackAfter, NackDelay: time.Minute}
	var handled atomic.Int64
	work := operators.ParallelMap(2, func(_ context.Context, m *source.Message) (*source.Message, error) {
		if m.Data[0]%3 == 0 { // '0', '3', '6': these fail
			sink.Apply(m, errors.New("rejected"), policy) // OnFailure: nack after a minute
		} // the others reach the sink unsettled: OnSuccess, an ack
		if handled.Add(1) == 9 {
			src.Stop()
		}
		return m, nil
	})

	err = pipeline.From(src).
		Via(flow.EagerTrack(ext, 0), work).
		To(sink.Acknowledge(policy))
	if err := src.Close(ctx); err != nil {
		log.Fatal(err)
	}
	st := src.Stats()
	fmt.Println(err, "acked:", st.Acked, "nacked:", st.Nacked, "unsettled:", st.Unsettled)
	// Output: <nil> acked: 6 nacked: 3 unsettled: 0
}
