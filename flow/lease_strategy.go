package flow

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Bounds of the ack deadline the API accepts in a ModifyAckDeadline, and the
// defaults of Adaptive.
const (
	// maxDeadline is the longest ack deadline the API accepts (600 s).
	maxDeadline = 600 * time.Second
	// defaultAdaptiveMin is Adaptive's default lower bound (10 s, the
	// service's minimum stream ack deadline).
	defaultAdaptiveMin = 10 * time.Second
	// defaultAdaptiveMax is Adaptive's default upper bound (600 s).
	defaultAdaptiveMax = maxDeadline
	// exactlyOnceMinDeadline is the least deadline requested for a message
	// of an exactly-once subscription (60 s, as Google's clients use).
	exactlyOnceMinDeadline = 60 * time.Second
)

// Strategy chooses the ack deadline the extender requests and how often its
// loop looks at the leases. Fixed and Adaptive are the implementations.
// A Strategy is a description: each Extender keeps its own state for it, so
// one value may configure several extenders.
type Strategy interface {
	newPolicy(initial time.Duration) policy
	validate() error
}

// checkStrategy reports why s cannot work, or nil (nil s is the default).
func checkStrategy(s Strategy) error {
	if s == nil {
		return nil
	}
	return s.validate()
}

// policy is a Strategy's state inside one Extender. deadline and interval
// are called with the extender's mutex held; record is called without it,
// from any goroutine (once per acked message, so it takes no lock).
type policy interface {
	// deadline is the deadline to request now.
	deadline() time.Duration
	// interval is the time between two ticks of the extension loop.
	interval() time.Duration
	// record takes one receipt→ack latency.
	record(latency time.Duration)
}

// Fixed requests the same deadline every time and ticks every interval:
// each tick extends, to deadline, the leases that would otherwise expire
// before the next tick plus the margin. interval must be shorter than
// deadline (a quarter of it or less is sensible); deadline is rounded up to
// whole seconds and must be 1–600 s.
func Fixed(interval, deadline time.Duration) Strategy {
	return fixed{every: interval, d: deadline}
}

type fixed struct{ every, d time.Duration }

func (f fixed) validate() error {
	switch {
	case f.d < time.Second || f.d > maxDeadline:
		return fmt.Errorf("flow: Fixed deadline %v must be within 1s–600s", f.d)
	case f.every <= 0:
		return fmt.Errorf("flow: Fixed interval %v must be positive", f.every)
	case f.every >= f.d:
		return fmt.Errorf("flow: Fixed interval %v must be shorter than the deadline %v", f.every, f.d)
	}
	return nil
}

func (f fixed) newPolicy(time.Duration) policy { return &fixedPolicy{f} }

type fixedPolicy struct{ f fixed }

func (p *fixedPolicy) deadline() time.Duration { return ceilSeconds(p.f.d) }
func (p *fixedPolicy) interval() time.Duration { return p.f.every }
func (p *fixedPolicy) record(time.Duration)    {}

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
	if cfg.Min == 0 {
		cfg.Min = defaultAdaptiveMin
	}
	if cfg.Max == 0 {
		cfg.Max = defaultAdaptiveMax
	}
	return adaptive{cfg}
}

type adaptive struct{ cfg AdaptiveConfig }

func (a adaptive) validate() error {
	switch {
	case a.cfg.Min < time.Second:
		return fmt.Errorf("flow: Adaptive Min %v must be at least 1s", a.cfg.Min)
	case a.cfg.Max > maxDeadline:
		return fmt.Errorf("flow: Adaptive Max %v must be at most 600s", a.cfg.Max)
	case a.cfg.Min > a.cfg.Max:
		return fmt.Errorf("flow: Adaptive Min %v exceeds Max %v", a.cfg.Min, a.cfg.Max)
	}
	return nil
}

func (a adaptive) newPolicy(initial time.Duration) policy {
	p := &adaptivePolicy{min: ceilSeconds(a.cfg.Min), max: a.cfg.Max}
	p.current = p.clamp(ceilSeconds(initial))
	return p
}

// histBuckets holds one bucket per whole second of latency, 0–600 s; longer
// latencies land in the last one (the deadline cannot exceed 600 s anyway).
const histBuckets = 601

type adaptivePolicy struct {
	min, max time.Duration
	// counts and stale are written by record without the extender's
	// mutex; the percentile read under it sees each bucket atomically (a
	// record racing the read lands in the next one).
	counts  [histBuckets]atomic.Int64
	stale   atomic.Bool // records since current was computed (computed when asked: record is per ack)
	current time.Duration
}

func (p *adaptivePolicy) clamp(d time.Duration) time.Duration {
	return min(max(d, p.min), p.max)
}

func (p *adaptivePolicy) deadline() time.Duration {
	if p.stale.Load() && p.stale.Swap(false) {
		p.current = p.clamp(time.Duration(p.percentile(0.99)) * time.Second)
	}
	return p.current
}

func (p *adaptivePolicy) interval() time.Duration { return p.deadline() / 4 }

func (p *adaptivePolicy) record(latency time.Duration) {
	b := min(int64(ceilSeconds(max(latency, 0))/time.Second), histBuckets-1)
	p.counts[b].Add(1)
	if !p.stale.Load() {
		p.stale.Store(true)
	}
}

// percentile returns the smallest bucket (seconds) at or below which at
// least q of the recorded latencies lie.
func (p *adaptivePolicy) percentile(q float64) int {
	var counts [histBuckets]int64
	var total int64
	for b := range p.counts {
		counts[b] = p.counts[b].Load()
		total += counts[b]
	}
	target := int64(q*float64(total) + 0.999999) // ceil without float surprises at exact multiples
	target = max(target, 1)
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
