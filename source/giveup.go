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

// giveUp is one stream's bound on a run of failures: it starts when the
// stream loop starts or a healthy stream ends, and after timeout without a
// healthy stream the next failure is terminal. The bound is checked after
// each failed attempt, so the Source fails at most one backoff delay and
// one attempt after it passes.
type giveUp struct {
	timeout  time.Duration // ≤ 0: never
	since    time.Time
	attempts int
}

func newGiveUp(timeout time.Duration) giveUp {
	return giveUp{timeout: timeout, since: time.Now()}
}

// healthy starts a new run of failures: a stream just received a response.
func (g *giveUp) healthy() {
	g.since, g.attempts = time.Now(), 0
}

// failed counts a failed attempt and returns an *UnreachableError when the
// run of failures has lasted timeout or more; nil otherwise.
func (g *giveUp) failed(err error) error {
	g.attempts++
	if g.timeout <= 0 || time.Since(g.since) < g.timeout {
		return nil
	}
	return &UnreachableError{After: g.timeout, Attempts: g.attempts, Last: err}
}
