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
// flow-control dimension off (and as ReconnectTimeout or MaxExtension, the
// bound); it is flow.Unlimited, the one "no limit" of every config.
const Unlimited = flow.Unlimited

// Defaults of SubscriberConfig's subscriber-side fields; the stream-side
// defaults are the source's, so both agree.
const (
	defaultMaxExtension      = 60 * time.Minute
	defaultShutdownNackDelay = 5 * time.Second

	// minHeartbeatInterval bounds HeartbeatInterval from below: each
	// heartbeat is a request on every stream, and the service answers each.
	minHeartbeatInterval = time.Second
)

// SubscriberConfig configures a Subscriber. The zero value means the
// documented defaults; Validate reports bad values by field name.
type SubscriberConfig struct {
	// Conn or Client connect the subscriber (Client is the seam for tests);
	// when both are nil it dials with Connect (PUBSUB_EMULATOR_HOST, or TLS
	// and Application Default Credentials to pubsub.googleapis.com).
	Conn    grpc.ClientConnInterface
	Client  pubsubpb.SubscriberClient
	Connect ConnectOptions

	// StreamAckDeadline is the deadline the server gives each delivered
	// message before the first extension: 10–600 s, default 60 s.
	StreamAckDeadline time.Duration
	// ClientID is sent on every stream; default random, stable for the
	// subscriber's life (reconnects included).
	ClientID string
	// MaxOutstandingMessages and MaxOutstandingBytes bound what the client
	// holds unsettled (server-side on the initial request, divided among
	// streams, and client-side in FlowGate). Defaults 1000 and 100 MiB;
	// Unlimited turns a dimension off.
	MaxOutstandingMessages int64
	MaxOutstandingBytes    int64
	// Streams is the number of StreamingPull streams, default 1.
	Streams int
	// HeartbeatInterval (default 30 s, 1 s–10 min) and HeartbeatTimeout
	// (default 15 s, 1 ms–10 min): an empty request every interval; no
	// server response within the timeout after one restarts the stream.
	// A timeout set longer than a set interval is an error; the default
	// timeout with an interval set below 15 s is lowered to the interval.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// Backoff is the delay between reconnects: exponential with half
	// jitter, delay k drawn from [cap/2, cap], cap = Initial·Multiplier^k
	// up to Max, at least Initial (zero Initial: 100 ms; zero Max: 60 s;
	// zero Multiplier: 2), reset only after a healthy stream: one that
	// delivered a message or stayed open 10 s (see source.Config.Backoff).
	// Reconnect decides which stream failures are reconnected (true) and
	// which end Run (false); nil means source.DefaultClassifier.
	Backoff   gax.Backoff
	Reconnect func(source.Failure) bool
	// ReconnectTimeout bounds how long the streams may keep failing (an
	// endpoint that never answers, a network that is down, a server that
	// accepts each stream and drops it) without one healthy stream (one
	// that delivered a message or stayed open 10 s), counted from the last
	// healthy stream or the start: then Run, and pipelines from Source,
	// end, within about a second of it, with a *source.UnreachableError
	// carrying the last status. Until then every attempt shows in
	// Stats().Reconnects, Stats().LastError and the Logger. Default 2 min;
	// Unlimited retries until the context ends.
	ReconnectTimeout time.Duration

	// Lease chooses the deadline strategy: flow.Adaptive (the default: p99
	// of receipt→ack latency, clamped to 10–600 s) or flow.Fixed. MaxExtension (default 60
	// min; Unlimited for none) bounds how long one message is held.
	Lease        flow.Strategy
	MaxExtension time.Duration

	// OnSuccess (default Ack) and OnFailure (default Nack) settle messages
	// whose handler returned nil or an error; NackAfter uses NackDelay.
	OnSuccess Outcome
	OnFailure Outcome
	NackDelay time.Duration
	// OnShutdown settles messages received but not yet handed to processing
	// when the subscriber shuts down: default NackAfter with
	// ShutdownNackDelay (5 s); Nack or NoOp also allowed.
	OnShutdown        Outcome
	ShutdownNackDelay time.Duration
	// DrainTimeout bounds how long shutdown waits for messages in
	// processing to settle before nacking the rest (default 30 s): the
	// source's drain (source.Config.DrainTimeout) is this one.
	DrainTimeout time.Duration

	// Ordering processes messages of one ordering key one at a time, in
	// order, even if the subscription does not report message ordering.
	// Run and RunBatches always do so when the subscription does: as
	// GetSubscription says, or from the first message whose StreamingPull
	// response says so.
	Ordering bool

	// Logger receives connection, lease and ack events and the warnings
	// (nil: slog.Default(); slog.New(slog.DiscardHandler) for none).
	Logger *slog.Logger
	// MeterProvider receives OpenTelemetry metrics (default: none, free),
	// each with a "subscription" attribute (the full name). Counters,
	// observed from Stats: pubsubflow.subscriber.received, .acked,
	// .nacked, .extended (lease extensions the server accepted), .expired,
	// .reconnects. Gauges: pubsubflow.subscriber.outstanding (messages
	// holding a flow-control permit), .buffered (received, not yet
	// processing), .processing (in a handler). Histogram:
	// pubsubflow.subscriber.ack_latency, receipt to ack, in seconds.
	MeterProvider metric.MeterProvider
	// TracerProvider, if set, traces every message as Google's clients do
	// (the README's Tracing section): a "<subscription> subscribe" span
	// per message, child of the publisher's trace context from its
	// attributes; "<subscription> process" around the handler, carried by
	// the handler's ctx; "ack", "nack" and "modack" RPC spans linked to
	// the messages they settle. Default none: nothing is traced or
	// allocated for tracing.
	TracerProvider trace.TracerProvider
}

// ValidateSubscription checks a subscription name by the service's rules:
// projects/PROJECT/subscriptions/ID, the id 3–255 of letters, digits and
// -._~%+, starting with a letter and not with "goog". The CLI, pubsubtest
// and the Publisher apply the same rules (one validator).
func ValidateSubscription(name string) error {
	if err := limits.CheckName(limits.Subscriptions, name); err != nil {
		return fmt.Errorf("pubsubflow: %w", err)
	}
	return nil
}

// fieldError names the field in every configuration error.
func fieldError(field string, format string, args ...any) error {
	return fmt.Errorf("pubsubflow: SubscriberConfig.%s: %s", field, fmt.Sprintf(format, args...))
}

func inRange(field string, d, lo, hi time.Duration) error {
	if d != 0 && (d < lo || d > hi) {
		return fieldError(field, "%v is outside %v–%v", d, lo, hi)
	}
	return nil
}

func outcome(field string, o Outcome, allowed ...Outcome) error {
	if o == source.Pending {
		return nil
	}
	for _, a := range allowed {
		if o == a {
			return nil
		}
	}
	return fieldError(field, "outcome %v is not one of %v", o, allowed)
}

// Validate reports every bad value, each naming its field. A field that
// configures one of the composed operators is checked by that operator's
// own Validate (source.Config, flow.ExtenderConfig, sink.Policy) on the
// config parts maps it to, so each rule is written once; only what the
// Subscriber adds (the heartbeat bounds for users, shutdown) is
// checked here. The subscription name is checked by NewSubscriber
// (ValidateSubscription): a valid stand-in fills it here.
func (c *SubscriberConfig) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	src, ext, pol := c.parts(standInSubscription)
	add(wrapPart("", src.Validate()))
	add(wrapPart("(Lease, MaxExtension)", ext.Validate()))
	add(wrapPart("", pol.Validate()))
	if c.Conn != nil && c.Client != nil {
		add(fieldError("Conn", "set Conn or Client, not both"))
	}
	add(positiveRange("HeartbeatInterval", c.HeartbeatInterval, minHeartbeatInterval, 10*time.Minute))
	add(positiveRange("HeartbeatTimeout", c.HeartbeatTimeout, time.Millisecond, 10*time.Minute))
	if c.HeartbeatInterval > 0 && c.HeartbeatTimeout > c.HeartbeatInterval {
		add(fieldError("HeartbeatTimeout", "%v exceeds HeartbeatInterval %v: the answer to one heartbeat would be awaited past the next", c.HeartbeatTimeout, c.HeartbeatInterval))
	}
	add(outcome("OnShutdown", c.OnShutdown, Nack, NackAfter, NoOp))
	add(positiveRange("ShutdownNackDelay", c.ShutdownNackDelay, 0, 600*time.Second))
	add(positiveRange("DrainTimeout", c.DrainTimeout, 0, time.Hour))
	return errors.Join(errs...)
}

// standInSubscription is a valid name for checking a config before the
// subscription is known.
const standInSubscription = "projects/p/subscriptions/stand-in"

// wrapPart names the SubscriberConfig in an operator config's error (whose
// field names are SubscriberConfig's, but for what label says).
func wrapPart(label string, err error) error {
	if err == nil {
		return nil
	}
	if label == "" {
		return fmt.Errorf("pubsubflow: SubscriberConfig: %w", err)
	}
	return fmt.Errorf("pubsubflow: SubscriberConfig %s: %w", label, err)
}

// parts maps c onto the configs of the operators the Subscriber composes:
// the one place a SubscriberConfig field reaches an operator. Unlimited
// (-1) is every operator's "no limit" as it is.
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
		// Shutdown keeps its deadline: by the time it closes the
		// extender, what was held is settled and its modacks are moot.
		CloseTimeout: shutdownSlack,
	}
	pol := sink.Policy{OnSuccess: c.OnSuccess, OnFailure: c.OnFailure, NackDelay: c.NackDelay}
	return src, ext, pol
}

// positiveRange accepts 0 (the default) or a value in [lo, hi].
func positiveRange(field string, d, lo, hi time.Duration) error {
	if d < 0 {
		return fieldError(field, "%v: negative", d)
	}
	return inRange(field, d, lo, hi)
}

// withDefaults returns a copy with every zero field set to its default.
func (c SubscriberConfig) withDefaults() SubscriberConfig {
	c.StreamAckDeadline = cmp.Or(c.StreamAckDeadline, source.DefaultStreamAckDeadline)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, source.DefaultHeartbeatInterval)
	c.HeartbeatTimeout = cmp.Or(c.HeartbeatTimeout, min(source.DefaultHeartbeatTimeout, c.HeartbeatInterval))
	c.ReconnectTimeout = cmp.Or(c.ReconnectTimeout, source.DefaultReconnectTimeout)
	c.MaxExtension = cmp.Or(c.MaxExtension, defaultMaxExtension)
	c.ShutdownNackDelay = cmp.Or(c.ShutdownNackDelay, defaultShutdownNackDelay)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, source.DefaultDrainTimeout)
	c.MaxOutstandingMessages = cmp.Or(c.MaxOutstandingMessages, source.DefaultMaxOutstandingMessages)
	c.MaxOutstandingBytes = cmp.Or(c.MaxOutstandingBytes, source.DefaultMaxOutstandingBytes)
	c.Streams = cmp.Or(c.Streams, 1)
	c.OnSuccess = cmp.Or(c.OnSuccess, Ack) // the zero Outcome is "none set"
	c.OnFailure = cmp.Or(c.OnFailure, Nack)
	c.OnShutdown = cmp.Or(c.OnShutdown, NackAfter)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}
