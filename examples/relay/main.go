// Command relay subscribes to one topic, transforms each message and
// publishes it to another topic, acking each input only after its publish
// succeeded (a failed publish nacks the input, so the server redelivers
// it and nothing is lost).
//
// By default it runs against an embedded pubsubtest server: it creates an
// input topic and subscription and an output topic, publishes -n input
// messages, relays them and prints what happened:
//
//	go run ./examples/relay -n 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func main() {
	n := flag.Int("n", 100, "input messages to publish and relay")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := runEmbedded(ctx, os.Stdout, *n); err != nil {
		log.Fatal(err)
	}
}

// names of the embedded setup.
const (
	inputTopic  = "orders"
	inputSub    = "orders-relay"
	outputTopic = "orders-upper"
	outputSub   = "orders-upper-audit"
)

// runEmbedded starts a pubsubtest server, sets it up with n input
// messages and relays them.
func runEmbedded(ctx context.Context, w io.Writer, n int) error {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	opts, err := setup(ctx, srv, n)
	if err != nil {
		return err
	}
	if err := Run(ctx, w, opts); err != nil {
		return err
	}
	in, out := srv.SubscriptionStats(inputSub), srv.SubscriptionStats(outputSub)
	fmt.Fprintf(w, "input: %d published, %d acked, %d nacked; output: %d published\n", in.Published, in.Acked, in.Nacked, out.Published)
	return nil
}

// setup creates the topics and subscriptions, publishes n inputs and
// returns the Options that relay them.
func setup(ctx context.Context, srv *pubsubtest.Server, n int) (Options, error) {
	if _, err := srv.CreateTopic(ctx, inputTopic); err != nil {
		return Options{}, err
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: inputSub, Topic: inputTopic})
	if err != nil {
		return Options{}, err
	}
	out, err := srv.CreateTopic(ctx, outputTopic)
	if err != nil {
		return Options{}, err
	}
	if _, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: outputSub, Topic: outputTopic}); err != nil {
		return Options{}, err
	}
	msgs := make([]*pubsubpb.PubsubMessage, n)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte("order " + strconv.Itoa(i))}
	}
	for len(msgs) > 0 { // at most 1000 per request
		k := min(len(msgs), 1000)
		if _, err := srv.Publish(ctx, inputTopic, msgs[:k]...); err != nil {
			return Options{}, err
		}
		msgs = msgs[k:]
	}
	return Options{Conn: srv.ClientConn(), Subscription: sub, Topic: out, Count: n}, nil
}
