package source

import (
	"fmt"
	"time"
)

// DefaultReconnectTimeout is how long the streams may go without a healthy
// stream (one that received a response) before the Source fails.
const DefaultReconnectTimeout = 2 * time.Minute

// RetryForever, as Config.ReconnectTimeout, never gives up: a Source that
// cannot reach the service keeps retrying until its context ends.
const RetryForever time.Duration = -1

// UnreachableError ends a Source whose streams failed, again and again,
// for longer than Config.ReconnectTimeout without one healthy stream. It
// wraps the last failure, so status.Code reports its gRPC code (often
// UNAVAILABLE or DEADLINE_EXCEEDED).
type UnreachableError struct {
	// After is the ReconnectTimeout that passed; Attempts the failed
	// stream attempts in that time.
	After    time.Duration
	Attempts int
	// Last is the last attempt's error.
	Last error
}

// Error says how long and how often the streams failed, and the last error.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("no stream succeeded for %v (%d attempts; raise ReconnectTimeout, or RetryForever, to wait longer); last error: %v",
		e.After, e.Attempts, e.Last)
}

// Unwrap returns the last attempt's error.
func (e *UnreachableError) Unwrap() error { return e.Last }

// reachedAfter is how long a stream must stay open, without a response,
// to count as having reached the service: an unreachable endpoint fails an
// attempt within gRPC's connect timeout (20 s), while an idle subscription
// keeps a stream open, silent, until the server recycles it.
const reachedAfter = time.Minute

// giveUp is one stream's bound on a run of failures. A run starts when the
// stream loop starts or after an attempt that reached the service (it
// received a response, or stayed open reachedAfter); once timeout has
// passed in a run, the next failure is terminal. The bound is checked
// after each failed attempt, so the Source fails at most one backoff delay
// and one attempt after it passes. runStream calls begin before each
// attempt and failed after it.
type giveUp struct {
	timeout  time.Duration // ≤ 0: never
	since    time.Time     // start of the current run of failures
	began    time.Time     // start of the current attempt
	attempts int
}

func newGiveUp(timeout time.Duration) giveUp {
	now := time.Now()
	return giveUp{timeout: timeout, since: now, began: now}
}

// waited takes a wait for flow-control room out of the run of failures:
// holding the whole budget is not failing to reach the service.
func (g *giveUp) waited(d time.Duration) { g.since = g.since.Add(d) }

// deadline is when the current run of failures reaches the timeout (zero
// when there is none).
func (g *giveUp) deadline() time.Time {
	if g.timeout <= 0 {
		return time.Time{}
	}
	return g.since.Add(g.timeout)
}

// begin marks the start of an attempt.
func (g *giveUp) begin() { g.began = time.Now() }

// failed records the end of an attempt (healthy: it received a response)
// and returns an *UnreachableError when the run of failures has lasted
// timeout or more; nil otherwise.
func (g *giveUp) failed(healthy bool, err error) error {
	now := time.Now()
	if healthy || now.Sub(g.began) >= reachedAfter {
		g.since, g.attempts = now, 0
		return nil
	}
	g.attempts++
	if g.timeout <= 0 || now.Sub(g.since) < g.timeout {
		return nil
	}
	return &UnreachableError{After: g.timeout, Attempts: g.attempts, Last: err}
}
