package source

import (
	"fmt"
	"time"
)

// UnreachableError ends a Source whose streams failed, again and again,
// for longer than Config.ReconnectTimeout without one healthy stream. It
// wraps the last failure, so status.Code reports its gRPC code.
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
	return fmt.Sprintf("no healthy stream for %v (%d attempts; raise ReconnectTimeout, or set it to Unlimited, to wait longer); last error: %v",
		e.After, e.Attempts, e.Last)
}

// Unwrap returns the last attempt's error.
func (e *UnreachableError) Unwrap() error { return e.Last }

// healthyAfter is how long a stream that delivered no message must stay
// open, from the moment it opened, to count as healthy. Empty responses do
// not count: a server that answers each stream with one and then fails
// must not hold the client in a reconnect storm. 10 s is longer than such
// flapping and much shorter than an idle stream's life.
const healthyAfter = 10 * time.Second

// giveUp is one stream's bound on a run of failures, which starts when the
// stream loop starts or a healthy stream ends; once timeout has passed in
// a run, the next failure is terminal.
type giveUp struct {
	timeout  time.Duration // ≤ 0: never
	since    time.Time     // start of the current run of failures
	attempts int
}

func newGiveUp(timeout time.Duration) giveUp {
	return giveUp{timeout: timeout, since: time.Now()}
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

// failed records the end of an attempt and returns an *UnreachableError
// once the run of failures has lasted timeout.
func (g *giveUp) failed(healthy bool, err error) error {
	now := time.Now()
	if healthy {
		g.since, g.attempts = now, 0
		return nil
	}
	g.attempts++
	if g.timeout <= 0 || now.Sub(g.since) < g.timeout {
		return nil
	}
	return &UnreachableError{After: g.timeout, Attempts: g.attempts, Last: err}
}
