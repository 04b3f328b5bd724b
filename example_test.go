package pubsubflow_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// embedded starts an in-process server with a topic, a subscription and n
// published messages, standing in for Pub/Sub.
func embedded(n int) (*pubsubtest.Server, string) {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	topic, _ := srv.CreateTopic(ctx, "orders")
	sub, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "orders-worker", Topic: topic})
	for i := range n {
		srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte(fmt.Sprint("order ", i))})
	}
	return srv, sub
}

// Run with a handler: eight workers; returning nil acks, an error nacks.
// Cancelling the context drains and returns nil.
func ExampleSubscriber_Run() {
	srv, subscription := embedded(100)
	defer srv.Close()

	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var handled atomic.Int64
	go func() {
		for srv.SubscriptionStats(subscription).Acked < 100 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	err = sub.Run(ctx, 8, func(ctx context.Context, m *pubsubflow.Message) error {
		handled.Add(1)
		return nil
	})
	fmt.Println("run:", err, "handled:", handled.Load())
	// Output: run: <nil> handled: 100
}

// Compose your own stages between the subscriber's source and its paired
// Acknowledge sink. The source leases and counts every message on receipt,
// so what your stages buffer is covered.
func ExampleSubscriber_Source() {
	srv, subscription := embedded(100)
	defer srv.Close()

	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	var bytes atomic.Int64
	process := operators.ParallelMap(4, func(ctx context.Context, m *pubsubflow.Message) (*pubsubflow.Message, error) {
		bytes.Add(int64(len(m.Data)))
		return m, nil // reaching Acknowledge without an outcome means ack
	})

	closed := make(chan error, 1)
	go func() {
		for srv.SubscriptionStats(subscription).Acked < 100 {
			time.Sleep(10 * time.Millisecond)
		}
		closed <- sub.Close() // drains; the pipeline then ends
	}()
	err = pipeline.From(sub.Source()).Via(process).To(sub.Acknowledge())
	// The pipeline ends as Close drains; Close returns once it has
	// flushed the acks and stopped every goroutine.
	fmt.Println("pipeline:", err, "close:", <-closed, "acked:", srv.SubscriptionStats(subscription).Acked)
	// Output: pipeline: <nil> close: <nil> acked: 100
}
