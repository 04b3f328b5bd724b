// Package naive is a demonstration of a bug, not API: a subscriber that
// takes a message's lease only when downstream pulls the message, instead of
// on receipt. The benchmarks (bench) and `pubsubflow bench --compare-naive`
// run it beside the Subscriber to show what goes wrong.
//
// It is built from the library's own public parts, wired the wrong way:
//
//	source.Subscribe (no receipt steps) → go-streams Map → flow.EagerTrack(ext, 1) → ParallelMap(handler) → sink.Acknowledge
//
// A tracker behind another stage, with room for one message, takes a
// lease only when downstream pulls: it is the on-demand tracker. Leases,
// acks and the settle path are the real ones. The streams read as far
// ahead as gRPC flow control lets the server send, so messages wait in the
// stream's buffers behind busy handlers with no lease: when they wait
// longer than the stream ack deadline, the server redelivers them, and the
// handlers see them twice. The tracker notices that messages reach it
// long after receipt and says so once (its Warn), which is how a user who
// wires it so learns the fix.
package naive

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/flow"
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
	Handler func(ctx context.Context, m *source.Message)
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
	src    *source.Source
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the pipeline's, once done is closed

	stopOnce sync.Once
	stopErr  error

	started, finished atomic.Int64
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
	c.ext, err = flow.NewExtender(client, flow.ExtenderConfig{StreamAckDeadline: cfg.StreamAckDeadline, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	src, err := source.Subscribe(client, source.Config{
		Subscription:           subscription,
		StreamAckDeadline:      cfg.StreamAckDeadline,
		MaxOutstandingMessages: cfg.MaxOutstandingMessages,
		Streams:                cfg.Streams,
	})
	if err != nil {
		return nil, errors.Join(err, c.ext.Close())
	}
	c.src = src
	handle := operators.ParallelMap(cfg.Parallelism, func(ctx context.Context, m *source.Message) (*source.Message, error) {
		c.started.Add(1)
		defer c.finished.Add(1)
		cfg.Handler(ctx, m)
		return m, nil
	})
	track := flow.EagerTrack(c.ext, 1)
	track.Logger = slog.New(slog.DiscardHandler)

	ctx, c.cancel = context.WithCancel(ctx)
	go func() {
		defer close(c.done)
		c.err = pipeline.FromContext(ctx, stage.Source[*source.Message](c.src)).Via(passThrough(), track, handle).To(sink.Acknowledge(sink.Policy{}))
	}()
	return c, nil
}

// passThrough is a go-streams Map that hands each message on as it is:
// it keeps the tracker from being the stage right after the source (which
// would fuse it into the source's receipt steps, the right wiring).
func passThrough() stage.Flow[*source.Message, *source.Message] {
	return pipeline.Streams[*source.Message, *source.Message](func(_ *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewMap(func(m *source.Message) *source.Message { return m }, 1))
	}, pipeline.StreamsOptions[*source.Message]{})
}

// Stats returns the consumer's counters now.
func (c *Consumer) Stats() Stats {
	ss := c.src.Stats()
	st := Stats{Received: int64(ss.Received), Settled: int64(ss.Received) - ss.Unsettled}
	st.Outstanding = st.Received - st.Settled
	st.Processing = min(st.Outstanding, c.started.Load()-c.finished.Load())
	st.Buffered = max(0, st.Outstanding-st.Processing)
	return st
}

// Done is closed when the pipeline has ended: ctx was done, Stop was
// called, or it failed (Stop returns why).
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Stop ends the pipeline and waits for it, nacks the messages still held,
// sends the last acks and nacks within StopTimeout, and closes the
// extender: no goroutine
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
		c.stopErr = errors.Join(err, c.closeParts())
	})
	return c.stopErr
}

// closeParts closes the source (nacks what it still holds, flushes the
// acks), then the extender.
func (c *Consumer) closeParts() error {
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	return errors.Join(c.src.Close(ctx), c.ext.Close())
}
