package source

import (
	"math/rand/v2"
	"time"

	gax "github.com/googleapis/gax-go/v2"
)

// Default reconnect delays (Google's clients and the reference producer).
const (
	DefaultBackoffMin = 100 * time.Millisecond
	DefaultBackoffMax = 60 * time.Second
)

// Backoff is a reconnect delay policy. Start returns a fresh sequence of
// delays; every stream of a Source starts its own, so streams do not
// share (and race on) one sequence.
type Backoff interface {
	Start() Delays
}

// Delays is one sequence of reconnect delays, used by one goroutine.
type Delays interface {
	// Next returns the delay before the next attempt, or false to stop
	// retrying (the source then ends with the last failure).
	Next() (time.Duration, bool)
	// Reset starts the sequence over; the source calls it after a healthy
	// stream (one that received a response).
	Reset()
}

// BackoffFunc adapts a function to Backoff.
type BackoffFunc func() Delays

// Start calls f.
func (f BackoffFunc) Start() Delays { return f() }

// bounds fixes min and max: a non-positive min means DefaultBackoffMin, and
// max is at least min.
func bounds(minD, maxD time.Duration) (time.Duration, time.Duration) {
	if minD <= 0 {
		minD = DefaultBackoffMin
	}
	return minD, max(maxD, minD)
}

// RandomizedExponential is the default policy: gax-go's exponential backoff
// with full jitter (each delay drawn from (0, cur], cur doubling from min up
// to max), raised to at least min so that a failing stream is never retried
// in a busy loop.
func RandomizedExponential(minD, maxD time.Duration) Backoff {
	minD, maxD = bounds(minD, maxD)
	return BackoffFunc(func() Delays { return &gaxDelays{min: minD, max: maxD, bo: newGax(minD, maxD)} })
}

func newGax(minD, maxD time.Duration) gax.Backoff {
	return gax.Backoff{Initial: minD, Max: maxD, Multiplier: 2}
}

type gaxDelays struct {
	min, max time.Duration
	bo       gax.Backoff
}

func (d *gaxDelays) Next() (time.Duration, bool) { return max(d.bo.Pause(), d.min), true }
func (d *gaxDelays) Reset()                      { d.bo = newGax(d.min, d.max) }

// Exponential waits min, 2·min, 4·min, … up to max, without jitter (for
// tests and for callers who want predictable delays).
func Exponential(minD, maxD time.Duration) Backoff {
	minD, maxD = bounds(minD, maxD)
	return BackoffFunc(func() Delays { return &expDelays{min: minD, max: maxD, cur: minD} })
}

type expDelays struct{ min, max, cur time.Duration }

func (d *expDelays) Next() (time.Duration, bool) {
	v := d.cur
	d.cur = min(d.cur*2, d.max)
	return v, true
}

func (d *expDelays) Reset() { d.cur = d.min }

// Random waits a delay drawn uniformly from [min, max] each time.
func Random(minD, maxD time.Duration) Backoff {
	minD, maxD = bounds(minD, maxD)
	return BackoffFunc(func() Delays { return randDelays{min: minD, max: maxD} })
}

type randDelays struct{ min, max time.Duration }

func (d randDelays) Next() (time.Duration, bool) {
	return d.min + rand.N(d.max-d.min+1), true
}

func (randDelays) Reset() {}

// Stop never retries: the first failure of a stream ends the source.
func Stop() Backoff { return BackoffFunc(func() Delays { return stopDelays{} }) }

type stopDelays struct{}

func (stopDelays) Next() (time.Duration, bool) { return 0, false }
func (stopDelays) Reset()                      {}
