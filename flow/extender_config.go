package flow

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync/atomic"
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
	maxDeadline       = 600 * time.Second    // the longest ack deadline the API accepts
	// exactlyOnceMinDeadline is the least deadline requested for a message
	// of an exactly-once subscription (as Google's clients do).
	exactlyOnceMinDeadline = 60 * time.Second
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

// Strategy chooses the ack deadline the extender requests and how often its
// loop looks at the leases: Fixed or Adaptive (the zero Strategy is
// Adaptive(AdaptiveConfig{})). A Strategy is a description: each Extender
// keeps its own state for it, so one value may configure several.
type Strategy struct {
	min, max time.Duration // the deadline's bounds (equal for Fixed)
	every    time.Duration // Fixed's interval (Adaptive: a quarter of the deadline)
	fixed    bool
}

// Fixed requests the same deadline every time and ticks every interval:
// each tick extends, to deadline, the leases that would otherwise expire
// before the next tick plus the margin. interval must be shorter than
// deadline (a quarter of it or less is sensible); deadline is rounded up to
// whole seconds and must be 1–600 s.
func Fixed(interval, deadline time.Duration) Strategy {
	return Strategy{min: deadline, max: deadline, every: interval, fixed: true}
}

// AdaptiveConfig bounds the deadline Adaptive chooses. Zero fields mean
// the defaults: 10 s for Min and 600 s for Max.
type AdaptiveConfig struct {
	// Min is the shortest deadline requested (default 10 s; at least 1 s).
	Min time.Duration
	// Max is the longest deadline requested (default 600 s; at most 600 s).
	Max time.Duration
}

// Adaptive requests the 99th percentile of the receipt→ack latencies
// recorded so far (in whole seconds, as Google's clients do), clamped to
// [Min, Max]; before the first ack it requests the stream ack deadline,
// clamped likewise. The loop ticks every quarter of the current deadline.
// The latency distribution has one bucket per second up to 600 s, so
// recording and choosing cost O(1) and O(600) whatever the traffic.
func Adaptive(cfg AdaptiveConfig) Strategy {
	return Strategy{min: cmp.Or(cfg.Min, 10*time.Second), max: cmp.Or(cfg.Max, maxDeadline)}
}

func (s Strategy) validate() error {
	switch {
	case s.min < time.Second:
		return fmt.Errorf("flow: deadline %v must be at least 1s", s.min)
	case s.max > maxDeadline:
		return fmt.Errorf("flow: deadline %v must be at most 600s", s.max)
	case s.min > s.max:
		return fmt.Errorf("flow: Adaptive Min %v exceeds Max %v", s.min, s.max)
	case s.fixed && s.every <= 0:
		return fmt.Errorf("flow: Fixed interval %v must be positive", s.every)
	case s.fixed && s.every >= s.min:
		return fmt.Errorf("flow: Fixed interval %v must be shorter than the deadline %v", s.every, s.min)
	}
	return nil
}

// histBuckets holds one bucket per whole second of latency, 0–600 s; longer
// latencies land in the last one (the deadline cannot exceed 600 s anyway).
const histBuckets = 601

// policy is a Strategy's state inside one Extender, safe for concurrent
// use without a lock: record is called once per acked message.
type policy struct {
	Strategy
	// A record racing the percentile's read lands in the next one; current
	// is computed when asked (stale: records since), not per ack.
	counts  [histBuckets]atomic.Int64
	stale   atomic.Bool
	current atomic.Int64 // time.Duration
}

func newPolicy(s Strategy, initial time.Duration) *policy {
	p := &policy{Strategy: s}
	p.current.Store(int64(p.clamp(initial)))
	return p
}

func (p *policy) clamp(d time.Duration) time.Duration {
	return ceilSeconds(min(max(d, p.min), p.max))
}

// deadline is the deadline to request now.
func (p *policy) deadline() time.Duration {
	if p.stale.Load() && p.stale.Swap(false) {
		p.current.Store(int64(p.clamp(time.Duration(p.percentile(0.99)) * time.Second)))
	}
	return time.Duration(p.current.Load())
}

// interval is the time between two ticks.
func (p *policy) interval() time.Duration {
	if p.fixed {
		return p.every
	}
	return p.deadline() / 4
}

func (p *policy) record(latency time.Duration) {
	b := min(int64(ceilSeconds(max(latency, 0))/time.Second), histBuckets-1)
	p.counts[b].Add(1)
	if !p.stale.Load() {
		p.stale.Store(true)
	}
}

// percentile returns the smallest bucket (seconds) at or below which at
// least q of the recorded latencies lie.
func (p *policy) percentile(q float64) int {
	var counts [histBuckets]int64
	var total int64
	for b := range p.counts {
		counts[b] = p.counts[b].Load()
		total += counts[b]
	}
	target := max(int64(q*float64(total)+0.999999), 1) // ceil without float surprises at exact multiples
	var seen int64
	for b, c := range counts {
		seen += c
		if seen >= target {
			return b
		}
	}
	return histBuckets - 1
}

// ceilSeconds rounds d up to whole seconds: the API counts deadlines in
// seconds, and rounding down could request less than the caller asked for.
func ceilSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}
