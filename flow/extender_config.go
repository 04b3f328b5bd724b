package flow

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

// Defaults of ExtenderConfig's zero fields.
const (
	// defaultStreamAckDeadline is the stream ack deadline assumed for a
	// message until its receipt modack succeeded, and Adaptive's starting
	// deadline.
	defaultStreamAckDeadline = 60 * time.Second
	// defaultMaxExtension is how long a lease is extended at most, from
	// receipt, before it is dropped and the server redelivers.
	defaultMaxExtension = 60 * time.Minute
	// defaultMargin is the safety margin: a lease is extended when it would
	// otherwise expire before the next tick plus the margin. It covers the
	// RPC's latency and a retry or two (Google's clients use 5 s too). It is
	// scaled down to half the deadline for deadlines under 10 s.
	defaultMargin = 5 * time.Second
	// defaultMaxInFlight is how many ModifyAckDeadline RPCs run at once.
	defaultMaxInFlight = 4
	// defaultRetryDeadline is how long a modack that fails transiently is
	// retried, with backoff, before its leases are given up on (exactly-once
	// receipt modacks: the message is dropped; otherwise the lease stays and
	// the next tick tries again).
	defaultRetryDeadline = 60 * time.Second
	// defaultCloseTimeout bounds how long Close waits for in-flight RPCs
	// before cancelling them.
	defaultCloseTimeout = 5 * time.Second
)

// Internal bounds, documented here because they shape behaviour.
const (
	// receiptFlushDelay is how long a receipt modack waits for others to
	// share its request. A full request (1000 ids) goes at once.
	receiptFlushDelay = 2 * time.Millisecond
	// attemptTimeout bounds one ModifyAckDeadline attempt, so a hung call
	// cannot hold a slot forever. Retries back off as every RPC's do
	// (internal/retry: 100 ms to 60 s; 1 s to 64 s exactly-once).
	attemptTimeout = 30 * time.Second
	// jitter spreads ticks uniformly over ±10 % of the interval.
	jitter = 0.1
)

// ExtenderConfig configures an Extender. The zero value means the documented
// defaults: Adaptive deadlines within 10–600 s starting from a 60 s stream
// ack deadline, 60 min max extension, 5 s margin, 4 RPCs in flight.
type ExtenderConfig struct {
	// Strategy chooses deadlines. Nil means Adaptive(AdaptiveConfig{})
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
	// Margin is the safety margin (zero: 5 s). The margin in effect is
	// min(Margin, deadline/2).
	Margin time.Duration
	// MaxInFlight bounds concurrent ModifyAckDeadline RPCs per source
	// (zero: 4).
	MaxInFlight int
	// RetryDeadline bounds the retries of one modack request (zero: 60 s).
	RetryDeadline time.Duration
	// CloseTimeout bounds how long Close waits for in-flight RPCs before
	// cancelling them (zero: 5 s).
	CloseTimeout time.Duration
	// TracerProvider, if set, traces every modack attempt: a "modack" span
	// linked to the subscribe spans (see source.Config.TracerProvider) of
	// the messages it extends. Nil: none.
	TracerProvider trace.TracerProvider
	// events, if set, also receives every event (tests observe with it).
	events func(event.Event)
	// Logger receives warnings about failed RPCs (nil: slog.Default()).
	Logger *slog.Logger
}

// Validate reports the first invalid field, or nil.
func (c ExtenderConfig) Validate() error {
	switch {
	case c.StreamAckDeadline != 0 && (c.StreamAckDeadline < time.Second || c.StreamAckDeadline > maxDeadline):
		return fmt.Errorf("flow: StreamAckDeadline %v must be within 1s–600s", c.StreamAckDeadline)
	case c.MaxExtension > 0 && c.MaxExtension < cmp.Or(c.StreamAckDeadline, defaultStreamAckDeadline):
		return fmt.Errorf("flow: MaxExtension %v is shorter than the stream ack deadline %v: every lease would end before its first extension", c.MaxExtension, cmp.Or(c.StreamAckDeadline, defaultStreamAckDeadline))
	case c.MaxExtension < 0 && c.MaxExtension != Unlimited:
		return fmt.Errorf("flow: MaxExtension %v must be ≥ 0 (0 means %v) or Unlimited", c.MaxExtension, defaultMaxExtension)
	case c.Margin < 0:
		return fmt.Errorf("flow: Margin %v must not be negative", c.Margin)
	case c.MaxInFlight < 0:
		return fmt.Errorf("flow: MaxInFlight %d must not be negative", c.MaxInFlight)
	case c.RetryDeadline < 0:
		return fmt.Errorf("flow: RetryDeadline %v must not be negative", c.RetryDeadline)
	case c.CloseTimeout < 0:
		return fmt.Errorf("flow: CloseTimeout %v must not be negative", c.CloseTimeout)
	}
	return checkStrategy(c.Strategy)
}

// withDefaults returns c with every zero field replaced by its default.
func (c ExtenderConfig) withDefaults() ExtenderConfig {
	c.StreamAckDeadline = cmp.Or(c.StreamAckDeadline, defaultStreamAckDeadline)
	c.Strategy = cmp.Or(c.Strategy, Adaptive(AdaptiveConfig{}))
	c.MaxExtension = cmp.Or(c.MaxExtension, defaultMaxExtension)
	c.Margin = cmp.Or(c.Margin, defaultMargin)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, defaultMaxInFlight)
	c.RetryDeadline = cmp.Or(c.RetryDeadline, defaultRetryDeadline)
	c.CloseTimeout = cmp.Or(c.CloseTimeout, defaultCloseTimeout)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}
