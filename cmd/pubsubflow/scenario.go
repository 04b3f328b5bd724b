package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// scenario sizes a demo or bench run.
type scenario struct {
	messages       int
	size           int // payload bytes
	parallelism    int
	handlerDelay   time.Duration
	streams        int
	ackDeadline    time.Duration // the stream ack deadline
	maxOutstanding int64
	progress       string
	progressEvery  time.Duration
	timeout        time.Duration
	inMemory       bool
	tracer         trace.TracerProvider // bench --trace; nil: none
}

// demoScenario is the default of demo and bench: the library's default
// limits (1000 outstanding) and a slow handler, 250 ms on
// 10 workers, so the last of the 1000 buffered messages waits ≈ 25 s for a
// worker while the stream ack deadline is 10 s.
//
// The handler must be slow per message, not merely the backlog long: a
// demand-driven tracker reads the stream only as workers free up, so what
// waits unleased is what gRPC's flow-control windows let the server send
// ahead (measured over loopback: about 1,600 messages of 64 bytes). Here
// all 1000 fit, and they wait up to 25 s, past the deadline, so the naive
// shape redelivers. With a fast handler (5000 messages, 25 ms on 8
// workers) those 1,600 would wait ≈ 5 s and the bug would hide, whatever
// the backlog.
func demoScenario() scenario {
	return scenario{
		messages:       1000,
		size:           64,
		parallelism:    10,
		handlerDelay:   250 * time.Millisecond,
		streams:        1,
		ackDeadline:    10 * time.Second,
		maxOutstanding: 1000,
		progress:       progressAuto,
		progressEvery:  time.Second,
		timeout:        2 * time.Minute,
	}
}

func (s *scenario) register(fs *pflag.FlagSet) {
	fs.IntVar(&s.messages, "messages", s.messages, "messages to publish and consume")
	fs.IntVar(&s.size, "message-size", s.size, "payload bytes per message")
	fs.IntVar(&s.parallelism, "parallelism", s.parallelism, "handler workers")
	fs.DurationVar(&s.handlerDelay, "handler-delay", s.handlerDelay, "time each handler call takes")
	fs.IntVar(&s.streams, "streams", s.streams, "StreamingPull streams")
	fs.DurationVar(&s.ackDeadline, "ack-deadline", s.ackDeadline, "stream ack deadline, 10s–600s")
	fs.Int64Var(&s.maxOutstanding, "max-outstanding", s.maxOutstanding, "flow control: messages held at once")
	fs.StringVar(&s.progress, "progress", s.progress, "progress display: auto (a bar on a terminal, lines otherwise), bar, lines, none")
	fs.DurationVar(&s.progressEvery, "progress-every", s.progressEvery, "interval of progress lines")
	fs.DurationVar(&s.timeout, "timeout", s.timeout, "give up after this long")
	fs.BoolVar(&s.inMemory, "in-memory", false, "serve the embedded server over an in-memory listener instead of loopback TCP")
}

func (s *scenario) validate() error {
	switch {
	case s.messages < 1:
		return usagef("--messages %d: want ≥ 1", s.messages)
	case s.size < 1 || s.size > 10<<20:
		return usagef("--message-size %d: want 1–%d", s.size, 10<<20)
	case s.parallelism < 1 || s.parallelism > 10000:
		return usagef("--parallelism %d: want 1–10000", s.parallelism)
	case s.handlerDelay < 0:
		return usagef("--handler-delay %v: want ≥ 0", s.handlerDelay)
	case s.streams < 1 || s.streams > 64:
		return usagef("--streams %d: want 1–64", s.streams)
	case s.ackDeadline < 10*time.Second || s.ackDeadline > 600*time.Second:
		return usagef("--ack-deadline %v: want 10s–600s", s.ackDeadline)
	case s.maxOutstanding < 1:
		return usagef("--max-outstanding %d: want ≥ 1", s.maxOutstanding)
	case s.progressEvery <= 0:
		return usagef("--progress-every %v: want > 0", s.progressEvery)
	case s.timeout <= 0:
		return usagef("--timeout %v: want > 0", s.timeout)
	}
	return checkProgressMode(s.progress)
}

// Names of the embedded server's resources.
const (
	embeddedTopic = "pubsubflow-demo"
	embeddedSub   = "pubsubflow-demo-sub"
)

// target is what a run consumes: the subscription of an in-process
// pubsubtest server (srv) with one topic, or a real subscription; and a
// connection to it that m measures.
type target struct {
	srv   *pubsubtest.Server // nil on a real subscription
	conn  *grpc.ClientConn
	m     *meter
	topic string // where the backlog is published; "": none
	sub   string
}

// startEmbedded starts an embedded server and connects to it.
func startEmbedded(ctx context.Context, s scenario) (*target, error) {
	var opts []pubsubtest.Option
	if s.inMemory {
		opts = append(opts, pubsubtest.WithBufconn())
	}
	srv, err := pubsubtest.NewServer(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded server: %w", err)
	}
	topic, err := srv.CreateTopic(ctx, embeddedTopic)
	if err == nil {
		_, err = srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: embeddedSub, Topic: topic, AckDeadline: s.ackDeadline})
	}
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("setting up the embedded server: %w", err)
	}
	m := newMeter(s.handlerDelay)
	conn, err := srv.Dial(ctx, grpc.WithChainUnaryInterceptor(m.interceptor))
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	return &target{srv: srv, conn: conn, m: m, topic: topic, sub: "projects/" + srv.Project() + "/subscriptions/" + embeddedSub}, nil
}

func (t *target) close() {
	_ = t.conn.Close()
	if t.srv != nil {
		_ = t.srv.Close()
	}
}

// publishBacklog publishes n messages of size bytes through our batching
// publisher and waits for every id.
func publishBacklog(ctx context.Context, conn grpc.ClientConnInterface, topic string, n, size int, tp trace.TracerProvider) error {
	pub, err := publisher.New(conn, topic, publisher.Config{MaxMessages: 1000, TracerProvider: tp})
	if err != nil {
		return err
	}
	results := make([]*publisher.Result, 0, min(n, publishWindow))
	var errs []error
	wait := func() {
		for _, r := range results {
			if _, err := r.Get(ctx); err != nil {
				errs = append(errs, err)
				break
			}
		}
		results = results[:0]
	}
	for i := range n {
		data := bytes.Repeat([]byte{'.'}, size)
		copy(data, fmt.Sprintf("message %d ", i))
		results = append(results, pub.Publish(ctx, &publisher.Message{Data: data}))
		if len(results) == cap(results) {
			wait()
		}
		if len(errs) > 0 {
			break
		}
	}
	wait()
	errs = append(errs, pub.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("publishing the backlog: %w", err)
	}
	return nil
}
