// Command quickstart is the smallest complete pubsubflow subscriber: Run
// with a handler on eight workers; returning nil acks, an error nacks.
//
// By default it needs nothing: it starts an embedded Pub/Sub server
// (pubsubtest), publishes -n messages and consumes them:
//
//	go run ./examples/quickstart
//
// Given -subscription it consumes a real one instead (or an emulator's,
// with PUBSUB_EMULATOR_HOST), with Application Default Credentials, until
// -n messages were handled or SIGINT:
//
//	go run ./examples/quickstart -subscription projects/P/subscriptions/S -n 10
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func main() {
	n := flag.Int("n", 100, "messages to handle")
	subscription := flag.String("subscription", "", "consume this subscription instead of the embedded server's")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *subscription == "" {
		err = runEmbedded(ctx, os.Stdout, *n)
	} else {
		// A nil Conn: the Subscriber dials PUBSUB_EMULATOR_HOST, or
		// Pub/Sub with Application Default Credentials.
		_, err = Run(ctx, os.Stdout, nil, *subscription, *n)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// runEmbedded starts an embedded server with a topic, a subscription and
// n published messages, and consumes them.
func runEmbedded(ctx context.Context, w io.Writer, n int) error {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	topic, err := srv.CreateTopic(ctx, "quickstart")
	if err != nil {
		return err
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "quickstart-sub", Topic: topic})
	if err != nil {
		return err
	}
	if err := publish(ctx, srv.ClientConn(), topic, n); err != nil {
		return err
	}
	if _, err := Run(ctx, w, srv.ClientConn(), sub, n); err != nil {
		return err
	}
	fmt.Fprintf(w, "server: %d acked, %d redelivered\n", srv.SubscriptionStats(sub).Acked, srv.SubscriptionStats(sub).Redelivered)
	return nil
}

// publish publishes n messages with pubsubflow's batching publisher.
func publish(ctx context.Context, conn grpc.ClientConnInterface, topic string, n int) error {
	pub, err := publisher.New(conn, topic, publisher.Config{})
	if err != nil {
		return err
	}
	defer pub.Close()
	results := make([]*publisher.Result, n)
	for i := range n {
		results[i] = pub.Publish(ctx, &publisher.Message{Data: fmt.Appendf(nil, "hello %d", i)})
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Run consumes subscription with eight workers until n messages were
// handled (or ctx is done) and returns how many were. conn nil dials as
// the environment says.
func Run(ctx context.Context, w io.Writer, conn grpc.ClientConnInterface, subscription string, n int) (int64, error) {
	sub, err := pubsubflow.NewSubscriber(ctx, subscription, pubsubflow.SubscriberConfig{Conn: conn})
	if err != nil {
		return 0, err
	}
	defer sub.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var handled atomic.Int64
	err = sub.Run(ctx, 8, func(ctx context.Context, m *pubsubflow.Message) error {
		if handled.Add(1) == int64(n) {
			cancel() // Run stops receiving, drains what is in flight, and returns
		}
		return nil // ack
	})
	fmt.Fprintf(w, "handled %d messages; subscriber stats: %+v\n", handled.Load(), summary(sub.Stats()))
	return handled.Load(), err
}

// summary keeps the stats worth printing.
func summary(s pubsubflow.Stats) map[string]any {
	return map[string]any{"received": s.Received, "acked": s.Acked, "nacked": s.Nacked, "redelivered": s.Redelivered, "outstanding": s.Outstanding}
}
