package ack

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

// Defaults of a zero Config.
const (
	DefaultMaxInFlight = 8
	// DefaultRetryDeadline bounds retries of an ack id that is not
	// exactly-once; DefaultExactlyOnceRetryDeadline those of one that is
	// (the server must confirm it, so it is worth waiting for).
	DefaultRetryDeadline            = 60 * time.Second
	DefaultExactlyOnceRetryDeadline = 600 * time.Second
	// DefaultGap spaces the requests of a kind under load: at most 1,000
	// a second, each carrying a millisecond's worth of acks or more.
	DefaultGap = time.Millisecond
	// DefaultRPCTimeout bounds one Acknowledge / ModifyAckDeadline attempt.
	DefaultRPCTimeout = 60 * time.Second
)

// MaxMaxInFlight bounds Config.MaxInFlight.
const MaxMaxInFlight = 1024

// Config configures an Acknowledger. The zero value means the documented
// defaults.
type Config struct {
	// MaxInFlight bounds concurrent RPCs per kind: Acknowledge, and
	// ModifyAckDeadline (0: DefaultMaxInFlight; at most MaxMaxInFlight).
	MaxInFlight int
	// RetryDeadline bounds how long an ack id is retried after its first
	// attempt (0: DefaultRetryDeadline, or DefaultExactlyOnceRetryDeadline
	// for exactly-once ack ids).
	RetryDeadline time.Duration
	// Gap is the least time between the starts of two requests of a kind
	// that are not full (0: DefaultGap; negative: none).
	Gap time.Duration
	// RPCTimeout bounds one attempt (0: DefaultRPCTimeout).
	RPCTimeout time.Duration
	// Confirmed, if set, is told at once about all the tags of a request
	// the server accepted whole, with the time the answer came, instead
	// of AckDone(nil) on each: their owner can then do its per-batch work
	// once and read the clock once. It runs like AckDone (on the
	// acknowledger's goroutines, without its lock) and must tell every
	// tag it is given (entries may be nil).
	Confirmed func(tags []Tag, now time.Time)
	// Tracer, if set, traces every RPC attempt (see Tracer). Nil: none.
	Tracer Tracer
	// Events receives Ack, Nack (counts the server accepted), Retry and
	// AckFailed events. Nil: none.
	Events event.Func
	// Logger logs failures (Warn) and retries (Debug). Nil: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.MaxInFlight < 0 || c.MaxInFlight > MaxMaxInFlight:
		return fmt.Errorf("ack: MaxInFlight %d must be within 0 (default %d) and %d", c.MaxInFlight, DefaultMaxInFlight, MaxMaxInFlight)
	case c.RetryDeadline < 0:
		return fmt.Errorf("ack: RetryDeadline %v must not be negative", c.RetryDeadline)
	case c.RPCTimeout < 0:
		return fmt.Errorf("ack: RPCTimeout %v must not be negative", c.RPCTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultMaxInFlight)
	c.RPCTimeout = cmp.Or(c.RPCTimeout, DefaultRPCTimeout)
	c.Gap = max(cmp.Or(c.Gap, DefaultGap), 0)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// retryDeadline is how long an ack id is retried.
func (c Config) retryDeadline(exactlyOnce bool) time.Duration {
	switch {
	case c.RetryDeadline > 0:
		return c.RetryDeadline
	case exactlyOnce:
		return DefaultExactlyOnceRetryDeadline
	default:
		return DefaultRetryDeadline
	}
}
