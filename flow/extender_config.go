package flow

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

const (
	defaultStreamAckDeadline = 60 * time.Second
	defaultMaxExtension      = 60 * time.Minute
	defaultMargin            = 5 * time.Second // a modack's latency and a retry or two, as Google's clients
	defaultCloseTimeout      = 5 * time.Second
	maxInFlight              = 4 // ModifyAckDeadline RPCs of one source at once
	// retryDeadline bounds a failing modack's retries; then an
	// exactly-once receipt's message is dropped, any other lease waits
	// for the next tick.
	retryDeadline     = 60 * time.Second
	receiptFlushDelay = 2 * time.Millisecond // for other receipt modacks to share the request
	attemptTimeout    = 30 * time.Second     // so a hung call cannot hold a slot forever
	jitter            = 0.1                  // ticks spread over ±10 % of the interval
)

// ExtenderConfig configures an Extender. The zero value means the documented
// defaults: Adaptive deadlines within 10–600 s starting from a 60 s stream
// ack deadline, 60 min max extension, 5 s margin.
type ExtenderConfig struct {
	// Strategy chooses deadlines. Zero means Adaptive(AdaptiveConfig{})
	// starting from StreamAckDeadline.
	Strategy Strategy
	// StreamAckDeadline is the stream's ack deadline: the lease a message
	// has on receipt, before its receipt modack. Zero means 60 s. Must be
	// 1–600 s (the service accepts 10–600 s; shorter values are for test
	// servers).
	StreamAckDeadline time.Duration
	// MaxExtension is how long after receipt a lease is extended at most.
	// Zero means 60 min; Unlimited means no limit. It is checked on
	// every tick, so a lease is dropped up to one tick (a quarter of the
	// deadline with Adaptive) after it passed the limit.
	MaxExtension time.Duration
	// Margin is the safety margin: a lease is extended when it would
	// otherwise expire before the next tick plus the margin (zero: 5 s).
	// The margin in effect is min(Margin, deadline/2).
	Margin time.Duration
	// CloseTimeout bounds how long Close waits for in-flight RPCs before
	// cancelling them (zero: 5 s).
	CloseTimeout time.Duration
	// TracerProvider, if set, traces every modack attempt: a "modack" span
	// linked to the subscribe spans of the messages it extends.
	TracerProvider trace.TracerProvider
	// events, if set, also receives every event (tests observe with it).
	events func(event.Event)
	// Logger receives warnings about failed RPCs (nil: slog.Default()).
	Logger *slog.Logger
}

// Validate reports the first invalid field, or nil.
func (c ExtenderConfig) Validate() error {
	stream := cmp.Or(c.StreamAckDeadline, defaultStreamAckDeadline)
	switch {
	case c.StreamAckDeadline != 0 && (c.StreamAckDeadline < time.Second || c.StreamAckDeadline > maxDeadline):
		return fmt.Errorf("flow: StreamAckDeadline %v must be within 1s–600s", c.StreamAckDeadline)
	case c.MaxExtension > 0 && c.MaxExtension < stream:
		return fmt.Errorf("flow: MaxExtension %v is shorter than the stream ack deadline %v: every lease would end before its first extension", c.MaxExtension, stream)
	case c.MaxExtension < 0 && c.MaxExtension != Unlimited:
		return fmt.Errorf("flow: MaxExtension %v must be ≥ 0 (0 means %v) or Unlimited", c.MaxExtension, defaultMaxExtension)
	case c.Margin < 0:
		return fmt.Errorf("flow: Margin %v must not be negative", c.Margin)
	case c.CloseTimeout < 0:
		return fmt.Errorf("flow: CloseTimeout %v must not be negative", c.CloseTimeout)
	}
	return cmp.Or(c.Strategy, Adaptive(AdaptiveConfig{})).validate()
}

// withDefaults returns c with every zero field replaced by its default.
func (c ExtenderConfig) withDefaults() ExtenderConfig {
	c.StreamAckDeadline = cmp.Or(c.StreamAckDeadline, defaultStreamAckDeadline)
	c.Strategy = cmp.Or(c.Strategy, Adaptive(AdaptiveConfig{}))
	c.MaxExtension = cmp.Or(c.MaxExtension, defaultMaxExtension)
	c.Margin = cmp.Or(c.Margin, defaultMargin)
	c.CloseTimeout = cmp.Or(c.CloseTimeout, defaultCloseTimeout)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}
