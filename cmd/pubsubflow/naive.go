package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/lease"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/sink"
	"github.com/pubsubflow/pubsubflow/internal/source"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// naiveStopTimeout bounds the final flush of the naive shape's acks.
const naiveStopTimeout = 30 * time.Second

// naiveConsumer is the seed's bug 1 rebuilt from our own parts, for
// bench --compare-naive: the StreamingPull source, then a go-streams Map
// that tracks each message's lease as it passes — so only when downstream
// asks for the next element — then the handlers and the Acknowledge sink:
//
//	source.Subscribe → bind → go-streams Map(ext.Track) → ParallelMap → Acknowledge
//
// Leases, acks and the settle path are the real ones; only the tracking is
// on demand instead of on receipt. Messages that wait in the stream's
// buffers behind busy handlers are not leased, so the server redelivers
// them when the stream ack deadline passes. It is a demonstration of the
// bug, not library API.
type naiveConsumer struct {
	client pubsubpb.SubscriberClient
	sub    string
	s      scenario
	m      *meter

	ext    *lease.Extender
	acks   *ack.Acknowledger
	cancel context.CancelFunc
	done   chan error

	received, settled, started, finished atomic.Int64
}

func newNaive(conn grpc.ClientConnInterface, sub string, s scenario, m *meter) *naiveConsumer {
	return &naiveConsumer{client: pubsubpb.NewSubscriberClient(conn), sub: sub, s: s, m: m}
}

// Settle counts a settled message and passes it to the real settle path.
type countingSettler struct {
	inner *sink.Settler
	n     *atomic.Int64
}

func (c countingSettler) Settle(m *message.Message, o message.Outcome, d time.Duration) {
	c.n.Add(1)
	c.inner.Settle(m, o, d)
}

func (c *naiveConsumer) start(ctx context.Context) error {
	var err error
	c.ext, err = lease.NewExtender(c.client, c.sub, lease.Config{StreamAckDeadline: c.s.ackDeadline})
	if err != nil {
		return err
	}
	c.acks, err = ack.New(c.client, c.sub, ack.Config{})
	if err != nil {
		_ = c.ext.Close()
		return err
	}
	src, err := source.Subscribe(c.client, source.Config{
		Subscription:           c.sub,
		StreamAckDeadline:      c.s.ackDeadline,
		MaxOutstandingMessages: c.s.maxOutstanding,
		Streams:                c.s.streams,
	})
	if err != nil {
		_ = c.acks.Close(ctx)
		_ = c.ext.Close()
		return err
	}
	settler := countingSettler{inner: sink.NewSettler(c.acks, nil, c.ext), n: &c.settled}
	bind := pipeline.Filter(func(m *message.Message) bool {
		c.received.Add(1)
		message.Bind(m, settler)
		return true
	}, nil)
	handle := operators.ParallelMap(c.s.parallelism, func(ctx context.Context, m *message.Message) (*message.Message, error) {
		c.started.Add(1)
		defer c.finished.Add(1)
		_ = c.m.handle(ctx, m)
		return m, nil
	}, operators.Options[*message.Message, *message.Message]{})

	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan error, 1)
	go func() {
		c.done <- pipeline.FromContext(ctx, src).Via(bind, naiveTrack(c.ext), handle).To(sink.Acknowledge(sink.Policy{}))
	}()
	return nil
}

// naiveTrack is the demand-driven tracker: a go-streams Map that tracks a
// message's lease when the element passes through it.
func naiveTrack(ext *lease.Extender) stage.Flow[*message.Message, *message.Message] {
	return pipeline.Streams[*message.Message, *message.Message](func(_ *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewMap(func(m *message.Message) *message.Message {
			ext.Track(m)
			return m
		}, 1))
	}, pipeline.StreamsOptions[*message.Message]{})
}

func (c *naiveConsumer) state() (outstanding, buffered, processing int64) {
	outstanding = c.received.Load() - c.settled.Load()
	processing = min(outstanding, c.started.Load()-c.finished.Load())
	return outstanding, max(0, outstanding-processing), processing
}

func (c *naiveConsumer) expired() int64 { return 0 }

func (c *naiveConsumer) stop() error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	err := <-c.done
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	// What is still leased goes back to the server; what was never leased
	// expires there on its own.
	for _, m := range c.ext.Leased() {
		m.Nack()
	}
	ctx, cancel := context.WithTimeout(context.Background(), naiveStopTimeout)
	defer cancel()
	return errors.Join(err, c.acks.Close(ctx), c.ext.Close())
}
