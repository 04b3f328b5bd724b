package pubsubflow

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// Unlimited, as MaxOutstandingMessages or MaxOutstandingBytes, turns that
// flow-control dimension off (as ReconnectTimeout or MaxExtension, the
// bound); it is flow.Unlimited, the one "no limit" of every config.
const Unlimited = flow.Unlimited

// minHeartbeatInterval: the service answers every heartbeat.
const minHeartbeatInterval = time.Second

// SubscriberConfig configures a Subscriber. The zero value means the
// documented defaults; Validate reports bad values by field name.
type SubscriberConfig struct {
	// Conn or Client connect the subscriber; when both are nil it dials
	// with Connect.
	Conn    grpc.ClientConnInterface
	Client  pubsubpb.SubscriberClient
	Connect ConnectOptions

	// StreamAckDeadline is the deadline the server gives each delivered
	// message before the first extension: 10–600 s, default 60 s.
	StreamAckDeadline time.Duration
	// ClientID is sent on every stream; default random.
	ClientID string
	// MaxOutstandingMessages and MaxOutstandingBytes bound what the client
	// holds unsettled: defaults 1000 and 100 MiB; Unlimited for none.
	MaxOutstandingMessages int64
	MaxOutstandingBytes    int64
	// Streams is the number of StreamingPull streams, default 1.
	Streams int
	// HeartbeatInterval (default 30 s, 1 s–10 min) and HeartbeatTimeout
	// (default 15 s or the interval if shorter, at most the interval): no
	// answer within the timeout after a heartbeat restarts the stream.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// Backoff is the delay between reconnects (see source.Config.Backoff).
	// Reconnect decides which stream failures are retried (nil:
	// source.DefaultClassifier).
	Backoff   gax.Backoff
	Reconnect func(source.Failure) bool
	// ReconnectTimeout bounds how long the streams may fail without one
	// healthy stream before Run ends with a *source.UnreachableError
	// (default 2 min; Unlimited for none).
	ReconnectTimeout time.Duration

	// Lease is the deadline strategy (default flow.Adaptive). MaxExtension
	// bounds how long one message is held (default 60 min).
	Lease        flow.Strategy
	MaxExtension time.Duration

	// OnSuccess (default Ack) and OnFailure (default Nack) settle messages
	// whose handler returned nil or an error; NackAfter uses NackDelay.
	OnSuccess Outcome
	OnFailure Outcome
	NackDelay time.Duration
	// OnShutdown settles what was received but not processing at shutdown:
	// default NackAfter with ShutdownNackDelay (5 s); or Nack, NoOp.
	OnShutdown        Outcome
	ShutdownNackDelay time.Duration
	// DrainTimeout bounds how long shutdown waits for messages in
	// processing to settle before nacking the rest (default 30 s).
	DrainTimeout time.Duration

	// Ordering processes messages of one ordering key one at a time, in
	// order, even if the subscription does not report message ordering.
	Ordering bool

	// Logger receives events and warnings (nil: slog.Default()).
	Logger *slog.Logger
	// MeterProvider receives the metrics pubsubflow.subscriber.received,
	// .acked, .nacked, .extended, .expired, .reconnects, .outstanding,
	// .buffered, .processing and .ack_latency (default none).
	MeterProvider metric.MeterProvider
	// TracerProvider, if set, traces every message as Google's clients do
	// (the README's Tracing section).
	TracerProvider trace.TracerProvider
}

// ValidateSubscription checks a subscription name by the service's rules
// (projects/PROJECT/subscriptions/ID).
func ValidateSubscription(name string) error {
	if err := limits.CheckName(limits.Subscriptions, name); err != nil {
		return fmt.Errorf("pubsubflow: %w", err)
	}
	return nil
}

func fieldError(field string, format string, args ...any) error {
	return fmt.Errorf("pubsubflow: SubscriberConfig.%s: %s", field, fmt.Sprintf(format, args...))
}

// Validate reports every bad value, each naming its field. An operator's
// fields are checked by its own Validate, so each rule is written once.
func (c *SubscriberConfig) Validate() error {
	src, ext, pol := c.parts("projects/p/subscriptions/stand-in")
	errs := []error{wrapPart("", src.Validate()), wrapPart(" (Lease, MaxExtension)", ext.Validate()), wrapPart("", pol.Validate())}
	if c.Conn != nil && c.Client != nil {
		errs = append(errs, fieldError("Conn", "set Conn or Client, not both"))
	}
	errs = append(errs,
		durationIn("HeartbeatInterval", c.HeartbeatInterval, minHeartbeatInterval, 10*time.Minute),
		durationIn("HeartbeatTimeout", c.HeartbeatTimeout, time.Millisecond, 10*time.Minute),
		durationIn("ShutdownNackDelay", c.ShutdownNackDelay, 0, 600*time.Second),
		durationIn("DrainTimeout", c.DrainTimeout, 0, time.Hour))
	if c.HeartbeatInterval > 0 && c.HeartbeatTimeout > c.HeartbeatInterval {
		errs = append(errs, fieldError("HeartbeatTimeout", "%v exceeds HeartbeatInterval %v: the answer to one heartbeat would be awaited past the next", c.HeartbeatTimeout, c.HeartbeatInterval))
	}
	switch c.OnShutdown {
	case source.Pending, Nack, NackAfter, NoOp:
	default:
		errs = append(errs, fieldError("OnShutdown", "outcome %v is not one of %v", c.OnShutdown, []Outcome{Nack, NackAfter, NoOp}))
	}
	return errors.Join(errs...)
}

// wrapPart names the SubscriberConfig in an operator config's error.
func wrapPart(label string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pubsubflow: SubscriberConfig%s: %w", label, err)
}

// durationIn accepts 0 (the default) or a value in [lo, hi].
func durationIn(field string, d, lo, hi time.Duration) error {
	if d < 0 {
		return fieldError(field, "%v: negative", d)
	}
	if d != 0 && (d < lo || d > hi) {
		return fieldError(field, "%v is outside %v–%v", d, lo, hi)
	}
	return nil
}

// parts maps c onto the configs of the operators the Subscriber composes.
func (c SubscriberConfig) parts(sub string) (source.Config, flow.ExtenderConfig, sink.Policy) {
	src := source.Config{
		Subscription:           sub,
		StreamAckDeadline:      c.StreamAckDeadline,
		ClientID:               c.ClientID,
		MaxOutstandingMessages: c.MaxOutstandingMessages,
		MaxOutstandingBytes:    c.MaxOutstandingBytes,
		Streams:                c.Streams,
		HeartbeatInterval:      c.HeartbeatInterval,
		HeartbeatTimeout:       c.HeartbeatTimeout,
		Backoff:                c.Backoff,
		Classify:               c.Reconnect,
		ReconnectTimeout:       c.ReconnectTimeout,
		DrainTimeout:           c.DrainTimeout, // the one drain: shutdown waits on the source's
		TracerProvider:         c.TracerProvider,
		Logger:                 c.Logger,
	}
	ext := flow.ExtenderConfig{
		Strategy:          c.Lease,
		StreamAckDeadline: c.StreamAckDeadline,
		MaxExtension:      c.MaxExtension,
		TracerProvider:    c.TracerProvider,
		Logger:            c.Logger,
		CloseTimeout:      shutdownSlack, // what was held is settled by then
	}
	return src, ext, sink.Policy{OnSuccess: c.OnSuccess, OnFailure: c.OnFailure, NackDelay: c.NackDelay}
}

// withDefaults sets the defaults the Subscriber reads itself; the
// operators default the rest.
func (c SubscriberConfig) withDefaults() SubscriberConfig {
	interval := cmp.Or(c.HeartbeatInterval, source.DefaultHeartbeatInterval)
	c.HeartbeatTimeout = cmp.Or(c.HeartbeatTimeout, min(source.DefaultHeartbeatTimeout, interval))
	c.ShutdownNackDelay = cmp.Or(c.ShutdownNackDelay, 5*time.Second)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, source.DefaultDrainTimeout)
	c.OnShutdown = cmp.Or(c.OnShutdown, NackAfter) // the zero Outcome is "none set"
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}
