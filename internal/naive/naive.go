// Package naive is a demonstration of a bug, not API: a subscriber that
// takes a message's lease only when downstream pulls the message, instead of
// on receipt. The benchmarks (bench) and `pubsubflow bench --compare-naive`
// run it beside the Subscriber to show what goes wrong.
//
// It is built from the library's own parts, wired the wrong way:
//
//	source.Subscribe → bind the settle path → go-streams Map(Extender.Track) → ParallelMap(handler) → sink.Acknowledge
//
// Leases, acks and the settle path are the real ones; only the tracking is
// on demand. The streams read as far ahead as gRPC flow control lets the
// server send, so messages wait in the stream's buffers behind busy
// handlers with no lease: when they wait longer than the stream ack
// deadline, the server redelivers them, and the handlers see them twice.
//
// A user cannot build this from the public API, on purpose: binding a
// message to its settle path, the lease extender and the raw streams are
// internal, and the Subscriber's public Source leases every message on
// receipt before it is handed on, so the wrong wiring cannot be expressed.
package naive

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// StopTimeout bounds how long Stop waits for the last acks and nacks to be
// sent.
const StopTimeout = 30 * time.Second

// Config sizes a Consumer. Zero values of the limits mean the internal
// source's and extender's defaults.
type Config struct {
	// Handler is the work on one message. It may settle the message; what
	// it leaves unsettled is acked when it returns. Required.
	Handler func(ctx context.Context, m *message.Message)
	// Parallelism is the number of handlers at work at once (at least 1).
	Parallelism int
	// StreamAckDeadline is the stream ack deadline, also the lease the
	// extender starts from. Zero means 60 s.
	StreamAckDeadline time.Duration
	// MaxOutstandingMessages is the flow-control limit asked of the server.
	// Zero means 1000.
	MaxOutstandingMessages int64
	// Streams is the number of StreamingPull streams. Zero means 1.
	Streams int
}

// Stats is a Consumer's state at one moment, from its counters.
type Stats struct {
	// Received and Settled count messages read from the streams and
	// messages settled (acked, nacked or expired) so far.
	Received, Settled int64
	// Outstanding is received but not yet settled; Processing is the part
	// of it in a handler, Buffered the rest.
	Outstanding, Buffered, Processing int64
}

// Consumer is a running demand-driven subscriber; Start makes one.
type Consumer struct {
	ext    *flow.Extender
	acks   *ack.Acknowledger
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the pipeline's, once done is closed

	stopOnce sync.Once
	stopErr  error

	received, settled, started, finished atomic.Int64
}

// Start subscribes to subscription through client and runs the
// demand-driven pipeline until ctx is done, the pipeline fails, or Stop.
func Start(ctx context.Context, client pubsubpb.SubscriberClient, subscription string, cfg Config) (*Consumer, error) {
	if cfg.Handler == nil {
		return nil, errors.New("naive: Config.Handler is required")
	}
	if cfg.Parallelism < 1 {
		return nil, errors.New("naive: Config.Parallelism must be at least 1")
	}
	c := &Consumer{done: make(chan struct{})}
	var err error
	c.ext, err = flow.NewExtender(client, subscription, flow.ExtenderConfig{StreamAckDeadline: cfg.StreamAckDeadline})
	if err != nil {
		return nil, err
	}
	c.acks, err = ack.New(client, subscription, ack.Config{})
	if err != nil {
		return nil, errors.Join(err, c.ext.Close())
	}
	src, err := source.Subscribe(client, source.Config{
		Subscription:           subscription,
		StreamAckDeadline:      cfg.StreamAckDeadline,
		MaxOutstandingMessages: cfg.MaxOutstandingMessages,
		Streams:                cfg.Streams,
	})
	if err != nil {
		return nil, errors.Join(err, c.closeParts())
	}
	settler := countingSettler{inner: sink.NewSettler(c.acks, nil, c.ext), n: &c.settled}
	bind := pipeline.Filter(func(m *message.Message) bool {
		c.received.Add(1)
		message.Bind(m, settler)
		return true
	}, nil)
	handle := operators.ParallelMap(cfg.Parallelism, func(ctx context.Context, m *message.Message) (*message.Message, error) {
		c.started.Add(1)
		defer c.finished.Add(1)
		cfg.Handler(ctx, m)
		return m, nil
	}, operators.Options[*message.Message, *message.Message]{})

	ctx, c.cancel = context.WithCancel(ctx)
	go func() {
		defer close(c.done)
		c.err = pipeline.FromContext(ctx, src).Via(bind, trackOnDemand(c.ext), handle).To(sink.Acknowledge(sink.Policy{}))
	}()
	return c, nil
}

// trackOnDemand is the bug: a go-streams Map that tracks a message's lease
// only when the element passes through it, that is when the handlers
// downstream ask for the next message.
func trackOnDemand(ext *flow.Extender) stage.Flow[*message.Message, *message.Message] {
	return pipeline.Streams[*message.Message, *message.Message](func(_ *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewMap(func(m *message.Message) *message.Message {
			ext.Track(m)
			return m
		}, 1))
	}, pipeline.StreamsOptions[*message.Message]{})
}

// countingSettler counts settled messages and passes them to the real
// settle path.
type countingSettler struct {
	inner *sink.Settler
	n     *atomic.Int64
}

func (s countingSettler) Settle(m *message.Message, o message.Outcome, d time.Duration) {
	s.n.Add(1)
	s.inner.Settle(m, o, d)
}

// Stats returns the consumer's counters now.
func (c *Consumer) Stats() Stats {
	st := Stats{Received: c.received.Load(), Settled: c.settled.Load()}
	st.Outstanding = st.Received - st.Settled
	st.Processing = min(st.Outstanding, c.started.Load()-c.finished.Load())
	st.Buffered = max(0, st.Outstanding-st.Processing)
	return st
}

// Done is closed when the pipeline has ended: ctx was done, Stop was
// called, or it failed (Stop returns why).
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Stop ends the pipeline and waits for it, nacks the messages still leased
// (those never leased expire at the server on their own), sends the last
// acks and nacks within StopTimeout, and closes the extender: no goroutine
// of the consumer is left. It returns the pipeline's error, if it failed
// other than by being stopped, joined with any error closing. Calling it
// again returns the same.
func (c *Consumer) Stop() error {
	c.stopOnce.Do(func() {
		c.cancel()
		<-c.done
		err := c.err
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		for _, m := range c.ext.Leased() {
			m.Nack()
		}
		c.stopErr = errors.Join(err, c.closeParts())
	})
	return c.stopErr
}

// closeParts flushes and closes the acknowledger, then the extender.
func (c *Consumer) closeParts() error {
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	return errors.Join(c.acks.Close(ctx), c.ext.Close())
}
