package source_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// The first outcome wins: later calls report false and change nothing.
func ExampleMessage_Ack() {
	m := &source.Message{ID: "1"}
	fmt.Println(m.Ack(), m.Nack(), m.Outcome(), m.Settled())
	// Output: true false ack true
}

// A handler that cannot process a message yet asks for it again later.
func ExampleMessage_NackAfter() {
	m := &source.Message{ID: "1"}
	fmt.Println(m.NackAfter(30*time.Second), m.Outcome())
	// Output: true nack-after
}

// An endpoint that never answers ends Run after ReconnectTimeout with an
// *source.UnreachableError carrying the last status (here a Subscriber's
// Run; a pipeline from source.Subscribe ends the same way).
func ExampleUnreachableError() {
	l, err := net.Listen("tcp", "127.0.0.1:0") // a port nobody serves once closed
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	l.Close()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), "projects/p/subscriptions/orders", pubsubflow.SubscriberConfig{
		Conn:             conn,
		Ordering:         true, // do not ask the (absent) server whether the subscription orders
		ReconnectTimeout: 300 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	err = sub.Run(context.Background(), 1, func(context.Context, *pubsubflow.Message) error { return nil })
	var unreachable *source.UnreachableError
	fmt.Println(errors.As(err, &unreachable), status.Code(err))
	// Output: true Unavailable
}

// A connection of your own keeps gRPC's 4 MiB receive limit unless you
// raise it; the first larger message then ends Run, naming the option.
func ExampleReceiveTooLargeError() {
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "orders")
	subscription, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "orders-worker", Topic: topic})
	big := &pubsubpb.PubsubMessage{Data: make([]byte, 5<<20)}
	if _, err := srv.Publish(ctx, topic, big); err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	sub, err := pubsubflow.NewSubscriber(ctx, subscription, pubsubflow.SubscriberConfig{Conn: conn})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	err = sub.Run(ctx, 1, func(context.Context, *pubsubflow.Message) error { return nil })
	var tooLarge *source.ReceiveTooLargeError
	fmt.Println(errors.As(err, &tooLarge), status.Code(err))
	// Output: true ResourceExhausted
}

// On an exactly-once subscription an ack is final only once the server
// confirmed it: wait on the message's AckResult (Message.Result).
func ExampleAckResult() {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()
	topic, _ := srv.CreateTopic(ctx, "payments")
	subscription, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{
		Name: "payments-worker", Topic: topic, EnableExactlyOnceDelivery: true,
	})
	srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte("pay 10")})
	sub, err := pubsubflow.NewSubscriber(ctx, subscription, pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	confirmed := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(runCtx, 1, func(ctx context.Context, m *pubsubflow.Message) error {
			m.Ack()
			confirmed <- m.Result().Get(ctx)
			return nil
		})
	}()
	fmt.Println("confirmation:", <-confirmed)
	stop()
	fmt.Println("run:", <-done)
	// Output:
	// confirmation: <nil>
	// run: <nil>
}
