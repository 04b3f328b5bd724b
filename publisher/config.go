package publisher

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// API limits of one PublishRequest.
const (
	// MaxRequestMessages is the most messages one Publish RPC may carry.
	MaxRequestMessages = limits.MaxRequestMessages
	// MaxRequestBytes is the largest encoded Publish request the service
	// accepts (10 MB, as Google's clients count it).
	MaxRequestBytes = limits.MaxRequestBytes
	// MaxDelay bounds Config.Delay: a longer wait before a batch is sent
	// is a mistake (a unit slip) more often than a wish, and it holds flow
	// control and memory for as long.
	MaxDelay = time.Minute
)

// Defaults applied to zero Config fields.
const (
	DefaultMaxMessages        = 100                    // messages per batch
	DefaultMaxBytes           = 1_000_000              // encoded bytes per batch
	DefaultDelay              = 10 * time.Millisecond  // oldest message's wait before its batch is sent
	DefaultMaxInFlightBatches = 16                     // Publish RPCs in flight at once
	DefaultFlowMaxMessages    = 10_000                 // messages published and not yet settled
	DefaultFlowMaxBytes       = 100 << 20              // bytes published and not yet settled
	DefaultRetryDeadline      = 60 * time.Second       // total time spent on one batch, retries included
	DefaultBackoffMin         = 100 * time.Millisecond // first retry delay
	DefaultBackoffMax         = 60 * time.Second       // longest retry delay
)

// Config configures a Publisher. Its zero value means the documented
// defaults; negative values are errors (see Validate).
type Config struct {
	// MaxMessages closes a batch when it holds this many messages
	// (default 100, at most MaxRequestMessages).
	MaxMessages int
	// MaxBytes closes a batch when its encoded size reaches this many
	// bytes (default 1 MB, at most MaxRequestBytes). A message is never
	// added to a batch it would take over MaxBytes: it opens the next one,
	// so only a message larger than MaxBytes on its own exceeds it.
	MaxBytes int
	// Delay closes a batch this long after its first message was added
	// (default 10 ms, at most MaxDelay).
	Delay time.Duration
	// MaxInFlightBatches bounds the Publish RPCs in flight at once, across
	// all ordering keys (default 16). Closed batches beyond it wait.
	MaxInFlightBatches int
	// EnableOrdering allows Message.OrderingKey. Without it, a message with
	// an ordering key fails with ErrOrderingDisabled.
	EnableOrdering bool
	// Flow bounds what is published and not yet settled.
	Flow FlowConfig
	// RetryDeadline bounds the time spent on one batch, retries included
	// (default 60 s). Retries back off randomly between BackoffMin and
	// BackoffMax, doubling.
	RetryDeadline time.Duration
	BackoffMin    time.Duration // default 100 ms
	BackoffMax    time.Duration // default 60 s
	// Retryable decides which Publish errors are transient. Nil means
	// DefaultRetryable.
	Retryable func(error) bool
	// Events receives telemetry (EventPublished, EventPublishFailed,
	// EventPaused, event.Retry); nil costs nothing. It is called on the
	// Publisher's goroutines and must not block.
	Events event.Func
	// Logger receives retries (debug) and failures (warn); nil logs
	// nothing.
	Logger *slog.Logger
	// TracerProvider, if set, traces every message as Google's clients
	// do: a "<topic> create" span per message, whose W3C trace context is
	// sent in the message's attributes ("googclient_traceparent") when it
	// is valid, and a "<topic> publish" span per Publish RPC linked to the
	// messages it carries. Nil (the default): nothing is traced or
	// allocated for tracing.
	TracerProvider trace.TracerProvider
}

// FlowConfig bounds the messages and bytes that were published and whose
// results have not settled yet. At the limit, Publish blocks until there
// is room or its context is done, or, with FailFast, fails at once with
// ErrFlowControlled. A single message larger than MaxBytes is admitted
// when nothing else is outstanding, so it cannot wait forever.
type FlowConfig struct {
	MaxMessages int  // default 10,000
	MaxBytes    int  // default 100 MiB
	FailFast    bool // false: block (the default)
}

// Validate reports every invalid field of c, each error naming its field.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("publisher: "+format, args...))
		}
	}
	check(c.MaxMessages < 0 || c.MaxMessages > MaxRequestMessages,
		"Config.MaxMessages %d must be within 0–%d (0: %d)", c.MaxMessages, MaxRequestMessages, DefaultMaxMessages)
	check(c.MaxBytes < 0 || c.MaxBytes > MaxRequestBytes,
		"Config.MaxBytes %d must be within 0–%d (0: %d)", c.MaxBytes, MaxRequestBytes, DefaultMaxBytes)
	check(c.Delay < 0 || c.Delay > MaxDelay, "Config.Delay %v must be within 0–%v (0: %v)", c.Delay, MaxDelay, DefaultDelay)
	check(c.MaxInFlightBatches < 0, "Config.MaxInFlightBatches %d must not be negative (0: %d)", c.MaxInFlightBatches, DefaultMaxInFlightBatches)
	check(c.Flow.MaxMessages < 0, "Config.Flow.MaxMessages %d must not be negative (0: %d)", c.Flow.MaxMessages, DefaultFlowMaxMessages)
	check(c.Flow.MaxBytes < 0, "Config.Flow.MaxBytes %d must not be negative (0: %d)", c.Flow.MaxBytes, DefaultFlowMaxBytes)
	check(c.RetryDeadline < 0, "Config.RetryDeadline %v must not be negative (0: %v)", c.RetryDeadline, DefaultRetryDeadline)
	check(c.BackoffMin < 0, "Config.BackoffMin %v must not be negative (0: %v)", c.BackoffMin, DefaultBackoffMin)
	check(c.BackoffMax < 0, "Config.BackoffMax %v must not be negative (0: %v)", c.BackoffMax, DefaultBackoffMax)
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
	def(&c.MaxMessages, DefaultMaxMessages)
	def(&c.MaxBytes, DefaultMaxBytes)
	defDur(&c.Delay, DefaultDelay)
	def(&c.MaxInFlightBatches, DefaultMaxInFlightBatches)
	def(&c.Flow.MaxMessages, DefaultFlowMaxMessages)
	def(&c.Flow.MaxBytes, DefaultFlowMaxBytes)
	defDur(&c.RetryDeadline, DefaultRetryDeadline)
	defDur(&c.BackoffMin, DefaultBackoffMin)
	defDur(&c.BackoffMax, DefaultBackoffMax)
	if c.Retryable == nil {
		c.Retryable = DefaultRetryable
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
