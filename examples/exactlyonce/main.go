// Command exactlyonce consumes a subscription with exactly-once delivery:
// each handler acks its message and waits for the server to confirm the
// ack (m.Result().Get) before it counts the message as done — the point
// of exactly-once delivery is that a confirmed ack will not be followed by
// a redelivery, while an unconfirmed one may be.
//
// By default it runs on an embedded Pub/Sub server, and makes the server
// fail the first -transient ack ids with a transient per-ack-id error
// (TRANSIENT_FAILURE_UNORDERED_ACK_ID), which the acknowledger retries:
//
//	go run ./examples/exactlyonce -n 200 -transient 5
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
	"sync/atomic"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func main() {
	n := flag.Int("n", 200, "messages to publish and process")
	transient := flag.Int("transient", 5, "ack ids the embedded server fails once with a transient error")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := runEmbedded(ctx, os.Stdout, *n, *transient); err != nil {
		log.Fatal(err)
	}
}

// Counts are the handler's tallies.
type Counts struct {
	Confirmed int64 // acks the server confirmed
	Failed    int64 // acks that failed for good (the message comes back)
	// NoResult counts acks without a Result: the subscription was not
	// exactly-once after all.
	NoResult int64
	// RPCErrors are the Acknowledge and ModifyAckDeadline calls that failed
	// (the injected transient failures), all retried.
	RPCErrors int64
}

func runEmbedded(ctx context.Context, w io.Writer, n, transient int) (Counts, error) {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		return Counts{}, err
	}
	defer srv.Close()
	topic, err := srv.CreateTopic(ctx, "payments")
	if err != nil {
		return Counts{}, err
	}
	subName, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{
		Name: "payments-once", Topic: topic, EnableExactlyOnceDelivery: true,
	})
	if err != nil {
		return Counts{}, err
	}
	var msgs []*pubsubpb.PubsubMessage
	for i := range n {
		msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte("payment " + strconv.Itoa(i))})
	}
	if _, err := srv.Publish(ctx, topic, msgs...); err != nil {
		return Counts{}, err
	}
	// Receipt modacks and acks alike may hit these; both are retried.
	srv.FailNextAckIDs(transient, "TRANSIENT_FAILURE_UNORDERED_ACK_ID")

	c, err := Run(ctx, srv.ClientConn(), subName, n)
	if err != nil {
		return c, err
	}
	st := srv.SubscriptionStats(subName)
	c.RPCErrors = srv.MethodStats("Acknowledge").Errors + srv.MethodStats("ModifyAckDeadline").Errors
	fmt.Fprintf(w, "%d acks confirmed, %d failed, %d without a result; %d ack/modack RPCs failed and were retried; server: %d acked, %d delivered, %d redelivered\n",
		c.Confirmed, c.Failed, c.NoResult, c.RPCErrors, st.Acked, st.Delivered, st.Redelivered)
	return c, nil
}

// Run processes subscription until n acks were confirmed (or ctx is done).
func Run(ctx context.Context, conn grpc.ClientConnInterface, subscription string, n int) (Counts, error) {
	sub, err := pubsubflow.NewSubscriber(ctx, subscription, pubsubflow.SubscriberConfig{Conn: conn})
	if err != nil {
		return Counts{}, err
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var confirmed, failed, noResult atomic.Int64
	err = sub.Run(ctx, 8, func(ctx context.Context, m *pubsubflow.Message) error {
		// ... process the payment, then:
		m.Ack()
		if r := m.Result(); r == nil { // the subscription is not exactly-once
			noResult.Add(1)
		} else {
			if err := r.Get(ctx); err != nil {
				// Not confirmed: the message will be redelivered; the
				// work must not be considered done.
				failed.Add(1)
				return nil
			}
		}
		if confirmed.Add(1) == int64(n) {
			cancel()
		}
		return nil
	})
	return Counts{Confirmed: confirmed.Load(), Failed: failed.Load(), NoResult: noResult.Load()}, err
}
