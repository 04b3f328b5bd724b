package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/publisher"
)

// Options configure Run.
type Options struct {
	Conn         grpc.ClientConnInterface // owned by the caller
	Subscription string                   // input, "projects/P/subscriptions/S"
	Topic        string                   // output, "projects/P/topics/T"
	// Count stops the relay once this many inputs were relayed and acked;
	// 0 runs until ctx is done.
	Count int
	// Publisher configures the output publisher (zero: defaults).
	Publisher publisher.Config
}

// countPoll is how often Run checks whether Count inputs were acked.
const countPoll = 10 * time.Millisecond

// Run relays Options.Subscription to Options.Topic:
//
//	sub.Source() → pubsubflow.Forward(transform)
//
// The Subscriber's source leases every input and counts it against the flow
// budget on receipt; Forward acks an input only once its output was
// published, and nacks it when the publish failed, so the server redelivers
// it and nothing is lost. Run returns nil after Count inputs were relayed
// (or when ctx is done), having drained: every input is settled.
func Run(ctx context.Context, w io.Writer, opt Options) error {
	sub, err := pubsubflow.NewSubscriber(ctx, opt.Subscription, pubsubflow.SubscriberConfig{
		Conn: opt.Conn,
		// What is still buffered at the end goes straight back to the
		// server: this relay stops on purpose, not because it failed.
		OnShutdown: pubsubflow.Nack,
	})
	if err != nil {
		return err
	}
	pub, err := publisher.New(opt.Conn, opt.Topic, opt.Publisher)
	if err != nil {
		_ = sub.Close()
		return err
	}

	done := make(chan error, 1)
	go func() {
		done <- pipeline.From(sub.Source()).To(pubsubflow.Forward(pub, transform, 500))
	}()
	err = waitForEnd(ctx, sub, opt.Count, done)
	// Close drains: the streams stop, Forward settles what it is publishing,
	// and the acknowledger flushes; then the pipeline ends.
	closeErr := sub.Close()
	if err == nil {
		err = <-done
	}
	err = errors.Join(err, closeErr, pub.Close())
	st := sub.Stats()
	fmt.Fprintf(w, "relayed %d messages (%d acks, %d nacks); publisher: %+v\n", st.Acked, st.Acked, st.Nacked, pub.Stats())
	return err
}

// waitForEnd returns nil once count inputs were acked or ctx is done, or
// the pipeline's error if it ended first.
func waitForEnd(ctx context.Context, sub *pubsubflow.Subscriber, count int, done <-chan error) error {
	tick := time.NewTicker(countPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("relay: the pipeline ended early")
			}
			return err
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if count > 0 && sub.Stats().Acked >= uint64(count) {
				return nil
			}
		}
	}
}

// transform is the relay's processing: upper-case the payload and record
// where it came from.
func transform(m *pubsubflow.Message) *publisher.Message {
	attrs := map[string]string{"source-id": m.ID}
	for k, v := range m.Attributes {
		attrs[k] = v
	}
	return &publisher.Message{Data: bytes.ToUpper(m.Data), Attributes: attrs}
}
