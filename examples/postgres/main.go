// Command postgres writes a Pub/Sub subscription into a PostgreSQL table,
// a batch at a time: Subscriber.RunBatches hands a worker up to -batch
// messages, the worker upserts them in one transaction keyed by message
// id, and only a committed batch is acked. A failed batch is nacked and
// comes back; the upsert makes every redelivery change nothing, so the
// table holds each message exactly once.
//
// It needs a PostgreSQL database (-dsn, or $DATABASE_URL). By default the
// messages come from an embedded Pub/Sub server (pubsubtest), with -n
// published first:
//
//	go run ./examples/postgres -dsn postgres://user@localhost/db
//
// Given -subscription it consumes a real one instead (or an emulator's,
// with PUBSUB_EMULATOR_HOST), with Application Default Credentials, until
// SIGINT:
//
//	go run ./examples/postgres -dsn ... -subscription projects/P/subscriptions/S
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
	subscription := flag.String("subscription", "", "consume this subscription instead of the embedded server's")
	n := flag.Int("n", 10000, "messages to publish to the embedded server")
	batch := flag.Int("batch", 500, "messages per batch (one transaction each)")
	workers := flag.Int("workers", 4, "batches written at once")
	flag.Parse()
	if *dsn == "" {
		log.Fatal("postgres: set -dsn or $DATABASE_URL")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	store, err := Open(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	cfg := Config{Workers: *workers, Batch: pubsubflow.BatchOptions{Size: *batch}}
	if *subscription == "" {
		err = runEmbedded(ctx, os.Stdout, store, *n, cfg)
	} else {
		// A nil Conn: the Subscriber dials PUBSUB_EMULATOR_HOST, or
		// Pub/Sub with Application Default Credentials.
		err = Consume(ctx, os.Stdout, store, *subscription, cfg, nil)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// Config sizes the consumer.
type Config struct {
	Subscriber pubsubflow.SubscriberConfig
	Workers    int
	Batch      pubsubflow.BatchOptions
	// Handler, if set, wraps the store's batch handler (the test injects
	// failures there).
	Handler func(pubsubflow.BatchHandler) pubsubflow.BatchHandler
}

// Consume writes subscription into store until ctx is done, or until done
// (if set) reports true, checked every 50 ms.
func Consume(ctx context.Context, w io.Writer, store *Store, subscription string, cfg Config, done func() bool) error {
	sub, err := pubsubflow.NewSubscriber(ctx, subscription, cfg.Subscriber)
	if err != nil {
		return err
	}
	defer sub.Close()
	var rows atomic.Int64
	store.Written = func(n int64) { rows.Add(n) }
	h := pubsubflow.BatchHandler(store.WriteBatch)
	if cfg.Handler != nil {
		h = cfg.Handler(h)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if done != nil {
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for !done() {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
			cancel()
		}()
	}
	err = sub.RunBatches(ctx, max(cfg.Workers, 1), cfg.Batch, h)
	st := sub.Stats()
	fmt.Fprintf(w, "rows inserted %d; received %d, acked %d, nacked %d, redelivered %d, outstanding %d\n",
		rows.Load(), st.Received, st.Acked, st.Nacked, st.Redelivered, st.Outstanding)
	return err
}

// runEmbedded publishes n messages to an embedded server and writes them
// into store, stopping once the server has every ack.
func runEmbedded(ctx context.Context, w io.Writer, store *Store, n int, cfg Config) error {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	topic, err := srv.CreateTopic(ctx, "events")
	if err != nil {
		return err
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "events-to-postgres", Topic: topic})
	if err != nil {
		return err
	}
	for i := 0; i < n; i += 1000 {
		msgs := make([]*pubsubpb.PubsubMessage, 0, 1000)
		for j := i; j < min(n, i+1000); j++ {
			msgs = append(msgs, &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, `{"event": %d}`, j)})
		}
		if _, err := srv.Publish(ctx, topic, msgs...); err != nil {
			return err
		}
	}
	cfg.Subscriber.Conn = srv.ClientConn()
	return Consume(ctx, w, store, sub, cfg, func() bool { return srv.SubscriptionStats(sub).Acked >= int64(n) })
}
