// Package readme holds the README's Go snippets, verbatim, so that the
// build compiles them; its test checks that every snippet in the README
// is here or in an example's code (examples/*/*.go, where the example's
// tests run it). The declarations around them stand in for the reader's
// own code. Nothing here is called.
package readme

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/proptest"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// The reader's own code, as the snippets name it.
var (
	conn         *grpc.ClientConn
	subscription string
	pool         db
	upsert       string
	a            stage.Flow[*pubsubflow.Message, *pubsubflow.Message]
)

type db interface {
	Begin(context.Context) (tx, error)
}

type tx interface {
	Rollback(context.Context) error
	Exec(context.Context, string, ...any) (any, error)
	Commit(context.Context) error
}

func handle(context.Context, []byte) error                   { return nil }
func insertAll(context.Context, []*pubsubflow.Message) error { return nil }
func ids([]*pubsubflow.Message) []string                     { return nil }
func bodies([]*pubsubflow.Message) [][]byte                  { return nil }
func recorded(*pubsubflow.Message) bool                      { return true }
func enrich(_ context.Context, m *pubsubflow.Message) (*pubsubflow.Message, error) {
	return m, nil
}
func myStages() stage.Flow[*pubsubflow.Message, *pubsubflow.Message] { return a }

// quickstart is the Quickstart's snippets, in order.
func quickstart(ctx context.Context) error {
	sub, err := pubsubflow.NewSubscriber(ctx, "projects/my-project/subscriptions/orders",
		pubsubflow.SubscriberConfig{}) // PUBSUB_EMULATOR_HOST, or TLS + Application Default Credentials
	if err != nil {
		return err
	}
	defer sub.Close()

	// Eight workers; nil acks, an error nacks. Cancelling ctx drains, then returns nil.
	err = sub.Run(ctx, 8, func(ctx context.Context, m *pubsubflow.Message) error {
		return handle(ctx, m.Data)
	})
	if err != nil {
		return err
	}
	err = sub.RunBatches(ctx, 4, pubsubflow.BatchOptions{Size: 500}, func(ctx context.Context, ms []*pubsubflow.Message) error {
		return insertAll(ctx, ms) // nil acks the batch, an error nacks it; m.Nack() a bad row alone
	})
	if err != nil {
		return err
	}
	err = pipeline.From(sub.Source()).
		Via(operators.ParallelMap(8, enrich)). // enrich: func(context.Context, *pubsubflow.Message) (*pubsubflow.Message, error)
		To(sub.Acknowledge())
	if err != nil {
		return err
	}
	orders := pubsubflow.Filter(func(m *pubsubflow.Message) bool { return m.Attributes["type"] == "order" }, pubsubflow.Ack)
	err = pipeline.From(sub.Source()).Via(orders).To(sub.Acknowledge())
	return err
}

// composing is "Composing the operators yourself".
func composing(ctx context.Context) error {
	client := pubsubpb.NewSubscriberClient(conn)              // from pubsubflow.Dial, say
	ext, _ := flow.NewExtender(client, flow.ExtenderConfig{}) // long-lived; share it
	defer ext.Close()
	src, _ := source.Subscribe(client, source.Config{Subscription: subscription})
	defer src.Close(ctx) // nacks what is still unsettled, flushes the acks

	err := pipeline.From(src).
		Via(flow.EagerTrack(ext, 0), flow.FlowGate(flow.NewFlowControl(1000, flow.Unlimited)), myStages()).
		To(sink.Acknowledge(sink.Policy{}))
	return err
}

// database is "Writing to a database".
func database(ctx context.Context, sub *pubsubflow.Subscriber) error {
	err := sub.RunBatches(ctx, 4, pubsubflow.BatchOptions{Size: 500},
		func(ctx context.Context, ms []*pubsubflow.Message) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err // the batch is nacked and comes back
			}
			defer tx.Rollback(ctx)
			// one statement for the batch, keyed by message id:
			// INSERT … SELECT * FROM unnest($1::text[], …) ON CONFLICT (message_id) DO NOTHING
			if _, err := tx.Exec(ctx, upsert, ids(ms), bodies(ms)); err != nil {
				return err
			}
			return tx.Commit(ctx) // nil: the batch is acked, after the commit
		})
	return err
}

// TestTopology is "Testing your topology".
func TestTopology(t *testing.T) {
	proptest.CheckTopology(t, func(ctx context.Context, env *proptest.Env) error {
		return env.From(ctx).Via(myStages()).To(env.Acknowledge())
	}, proptest.Options{
		Ordered:    true,        // acks keep each ordering key's order
		MaxLatency: time.Minute, // publish → ack, while no fault is in force
		SideEffect: recorded,    // asked at each ack: was the write done first?
	})
}

// The snippets' functions are compiled, never called.
var _, _, _ = quickstart, composing, database
