package publisher

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/internal/retry"
)

// Defaults applied to zero Config fields, and the bound on Delay.
const (
	defaultMaxMessages        = 100                    // messages per batch
	defaultMaxBytes           = 1_000_000              // encoded bytes per batch
	defaultDelay              = 10 * time.Millisecond  // oldest message's wait before its batch is sent
	defaultMaxInFlightBatches = 16                     // Publish RPCs in flight at once
	defaultFlowMaxMessages    = 10_000                 // messages published and not yet settled
	defaultFlowMaxBytes       = 100 << 20              // bytes published and not yet settled
	defaultRetryDeadline      = 60 * time.Second       // total time spent on one batch, retries included
	defaultBackoffMin         = 100 * time.Millisecond // first retry delay
	defaultBackoffMax         = 60 * time.Second       // longest retry delay
	// maxDelay bounds Config.Delay: a longer wait before a batch is sent
	// is a mistake (a unit slip) more often than a wish, and it holds flow
	// control and memory for as long.
	maxDelay = time.Minute
)

// Config configures a Publisher. Its zero value means the documented
// defaults; negative values are errors (see Validate), but for Unlimited
// as a Flow limit.
type Config struct {
	// MaxMessages closes a batch when it holds this many messages
	// (default 100, at most 1000: the most one Publish RPC may carry).
	MaxMessages int
	// MaxBytes closes a batch when its encoded size reaches this many
	// bytes (default 1 MB, at most 10 MB: the largest request the service
	// accepts). A message is never added to a batch it would take over
	// MaxBytes: it opens the next one, so only a message larger than
	// MaxBytes on its own exceeds it.
	MaxBytes int
	// Delay closes a batch this long after its first message was added
	// (default 10 ms, at most one minute: a longer wait is more often a
	// unit slip than a wish).
	Delay time.Duration
	// MaxInFlightBatches bounds the Publish RPCs in flight at once, across
	// all ordering keys (default 16). Closed batches beyond it wait.
	MaxInFlightBatches int
	// EnableOrdering allows Message.OrderingKey. Without it, a message with
	// an ordering key fails with ErrInvalidMessage.
	EnableOrdering bool
	// Flow bounds what is published and not yet settled.
	Flow FlowConfig
	// Hedging sends a duplicate of a batch whose Publish is slow (off by
	// default; see HedgingConfig: a hedge can publish a message twice).
	Hedging HedgingConfig
	// RetryDeadline bounds the time spent on one batch, retries included
	// (default 60 s). The pause before each retry is drawn at random up
	// to a ceiling that starts at BackoffMin (default 100 ms) and doubles
	// up to BackoffMax (default 60 s).
	RetryDeadline time.Duration
	BackoffMin    time.Duration
	BackoffMax    time.Duration
	// Retryable decides which Publish errors are transient. Nil means the
	// library's policy: the gRPC codes ABORTED, CANCELLED,
	// DEADLINE_EXCEEDED, INTERNAL, RESOURCE_EXHAUSTED, UNAVAILABLE and
	// UNKNOWN are retried; everything else (NOT_FOUND, PERMISSION_DENIED,
	// INVALID_ARGUMENT, …) and a plain context error are final. A request
	// the client cannot encode is never retried, whatever Retryable says.
	Retryable func(error) bool
	// Logger receives retries (debug), failed batches and paused keys
	// (warn); nil: slog.Default().
	Logger *slog.Logger
	// TracerProvider, if set, traces every message as Google's clients
	// do, with the tracer "github.com/pubsubflow/pubsubflow/publisher": a
	// "<topic> create" span per message, whose W3C trace context is sent
	// in the message's attributes ("googclient_traceparent") when it is
	// valid, with "publisher flow control" and "publisher batching" spans
	// under it, and a "<topic> publish" span per Publish RPC linked to the
	// messages it carries. Tracing costs what it records: a message whose
	// create span the sampler does not record costs that span's Start and
	// its trace context on the wire (so a subscriber honours the
	// decision), and nothing else; an RPC carrying no recorded message
	// gets no publish span. Nil (the default): nothing is traced or
	// allocated for tracing.
	TracerProvider trace.TracerProvider
}

// FlowConfig bounds the messages and bytes that were published and whose
// results have not settled yet. At the limit, Publish blocks until there
// is room or its context is done, or, with FailFast, fails at once with
// ErrFlowControlled. Blocked Publish calls are admitted in FIFO order. A
// single message larger than MaxBytes is admitted when nothing else is
// outstanding, so it cannot wait forever.
type FlowConfig struct {
	MaxMessages int  // default 10,000; Unlimited: none
	MaxBytes    int  // default 100 MiB; Unlimited: none
	FailFast    bool // false: block (the default)
}

// Unlimited, as FlowConfig.MaxMessages or MaxBytes, turns that limit off.
// It is the module's one "no limit" (pubsubflow.Unlimited has the same
// value); other negative values are errors.
const Unlimited = limits.Unlimited

// Validate reports every invalid field of c, each error naming its field.
// New calls it; call it yourself to check a configuration early.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("publisher: "+format, args...))
		}
	}
	check(c.MaxMessages < 0 || c.MaxMessages > limits.MaxRequestMessages,
		"Config.MaxMessages %d must be within 0–%d (0: %d)", c.MaxMessages, limits.MaxRequestMessages, defaultMaxMessages)
	check(c.MaxBytes < 0 || c.MaxBytes > limits.MaxRequestBytes,
		"Config.MaxBytes %d must be within 0–%d (0: %d)", c.MaxBytes, limits.MaxRequestBytes, defaultMaxBytes)
	check(c.Delay < 0 || c.Delay > maxDelay, "Config.Delay %v must be within 0–%v (0: %v)", c.Delay, maxDelay, defaultDelay)
	check(c.MaxInFlightBatches < 0, "Config.MaxInFlightBatches %d must not be negative (0: %d)", c.MaxInFlightBatches, defaultMaxInFlightBatches)
	check(c.Flow.MaxMessages < Unlimited, "Config.Flow.MaxMessages %d must be ≥ 0 (0: %d) or Unlimited", c.Flow.MaxMessages, defaultFlowMaxMessages)
	check(c.Flow.MaxBytes < Unlimited, "Config.Flow.MaxBytes %d must be ≥ 0 (0: %d) or Unlimited", c.Flow.MaxBytes, defaultFlowMaxBytes)
	for _, msg := range c.Hedging.problems() {
		check(true, "%s", msg)
	}
	check(c.RetryDeadline < 0, "Config.RetryDeadline %v must not be negative (0: %v)", c.RetryDeadline, defaultRetryDeadline)
	check(c.BackoffMin < 0, "Config.BackoffMin %v must not be negative (0: %v)", c.BackoffMin, defaultBackoffMin)
	check(c.BackoffMax < 0, "Config.BackoffMax %v must not be negative (0: %v)", c.BackoffMax, defaultBackoffMax)
	if len(errs) == 0 {
		d := c.withDefaults()
		check(d.BackoffMin > d.BackoffMax, "Config.BackoffMin %v exceeds BackoffMax %v", d.BackoffMin, d.BackoffMax)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxMessages, defaultMaxMessages)
	def(&c.MaxBytes, defaultMaxBytes)
	defDur(&c.Delay, defaultDelay)
	def(&c.MaxInFlightBatches, defaultMaxInFlightBatches)
	def(&c.Flow.MaxMessages, defaultFlowMaxMessages)
	def(&c.Flow.MaxBytes, defaultFlowMaxBytes)
	c.Hedging = c.Hedging.withDefaults()
	defDur(&c.RetryDeadline, defaultRetryDeadline)
	defDur(&c.BackoffMin, defaultBackoffMin)
	defDur(&c.BackoffMax, defaultBackoffMax)
	if c.Retryable == nil {
		c.Retryable = retry.Transient
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}
