package main

import (
	"context"
	"errors"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/examples/naive"
)

// consumer is one consumer shape under measurement: ours (the Subscriber)
// or the demand-driven tracker (examples/naive).
type consumer interface {
	// start begins consuming with the meter's handler.
	start(ctx context.Context) error
	// state returns outstanding, buffered and processing now.
	state() (outstanding, buffered, processing int64)
	// expired is the number of leases the client itself gave up (past the
	// maximum extension).
	expired() int64
	// stop ends consuming, settles what is left, and waits for every
	// goroutine the consumer started.
	stop() error
}

// oursConsumer is the Subscriber: Run with the meter's handler.
type oursConsumer struct {
	sub    *pubsubflow.Subscriber
	m      *meter
	par    int
	cancel context.CancelFunc
	done   chan error
}

func newOurs(ctx context.Context, conn grpc.ClientConnInterface, sub string, s scenario, m *meter) (*oursConsumer, error) {
	cfg := pubsubflow.SubscriberConfig{
		Conn:                   conn,
		StreamAckDeadline:      s.ackDeadline,
		MaxOutstandingMessages: s.maxOutstanding,
		Streams:                s.streams,
		OnShutdown:             pubsubflow.Nack,
		TracerProvider:         s.tracer,
	}
	su, err := pubsubflow.NewSubscriber(ctx, sub, cfg)
	if err != nil {
		return nil, err
	}
	return &oursConsumer{sub: su, m: m, par: s.parallelism}, nil
}

func (c *oursConsumer) start(ctx context.Context) error {
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan error, 1)
	go func() { c.done <- c.sub.Run(ctx, c.par, c.m.handle) }()
	return nil
}

func (c *oursConsumer) state() (outstanding, buffered, processing int64) {
	st := c.sub.Stats()
	return st.Outstanding, st.Buffered, st.Processing
}

func (c *oursConsumer) expired() int64 { return int64(c.sub.Stats().Expired) }

func (c *oursConsumer) stop() error {
	var err error
	if c.cancel != nil {
		c.cancel()
		err = <-c.done // Run drains and closes the subscriber
	}
	return errors.Join(err, c.sub.Close())
}

// naiveConsumer is the demand-driven tracker of examples/naive, for
// bench --compare-naive: it leases a message only when a handler asks for
// the next one, so what waits in the stream's buffers is not leased and the
// server redelivers it once the stream ack deadline passes.
type naiveConsumer struct {
	client pubsubpb.SubscriberClient
	sub    string
	cfg    naive.Config
	c      *naive.Consumer
}

func newNaive(conn grpc.ClientConnInterface, sub string, s scenario, m *meter) *naiveConsumer {
	return &naiveConsumer{
		client: pubsubpb.NewSubscriberClient(conn),
		sub:    sub,
		cfg: naive.Config{
			// The meter's handler acks; its error (the run was stopped) is
			// of no interest here.
			Handler:                func(ctx context.Context, msg *pubsubflow.Message) { _ = m.handle(ctx, msg) },
			Parallelism:            s.parallelism,
			StreamAckDeadline:      s.ackDeadline,
			MaxOutstandingMessages: s.maxOutstanding,
			Streams:                s.streams,
		},
	}
}

func (c *naiveConsumer) start(ctx context.Context) error {
	var err error
	c.c, err = naive.Start(ctx, c.client, c.sub, c.cfg)
	return err
}

func (c *naiveConsumer) state() (outstanding, buffered, processing int64) {
	st := c.c.Stats()
	return st.Outstanding, st.Buffered, st.Processing
}

// expired is 0: the naive shape never gives up a lease itself; what it
// never leased expires at the server.
func (c *naiveConsumer) expired() int64 { return 0 }

func (c *naiveConsumer) stop() error {
	if c.c == nil {
		return nil
	}
	return c.c.Stop()
}
