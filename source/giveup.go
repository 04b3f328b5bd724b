package source

import (
	"fmt"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// DefaultReconnectTimeout is how long a stream may go on failing without
// a healthy stream (one that delivered a message or stayed open 10 s, see
// Config.ReconnectTimeout) before the Source fails.
const DefaultReconnectTimeout = 2 * time.Minute

// Unlimited, as Config.ReconnectTimeout, never gives up (a Source that
// cannot reach the service keeps retrying until its context ends), and as
// Config.MaxOutstandingMessages or MaxOutstandingBytes turns that limit
// off. It is the module's one "no limit" (pubsubflow.Unlimited,
// flow.Unlimited, publisher.Unlimited); other negative values are errors.
const Unlimited = limits.Unlimited

// UnreachableError ends a Source whose streams failed, again and again,
// for longer than Config.ReconnectTimeout without one healthy stream
// (one that delivered a message or stayed open 10 s). It
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
	return fmt.Sprintf("no healthy stream for %v (%d attempts; raise ReconnectTimeout, or set it to Unlimited, to wait longer); last error: %v",
		e.After, e.Attempts, e.Last)
}

// Unwrap returns the last attempt's error.
func (e *UnreachableError) Unwrap() error { return e.Last }

// healthyAfter is how long a stream must stay open to count as healthy
// when it delivered no message. A stream is healthy once it has delivered
// a message (a response with at least one received message that passed
// the screening of malformed ones) or stayed open this long; only then
// does its failure reset the backoff and restart the ReconnectTimeout
// count. Empty responses do not count: a server that answers each stream
// with one empty response (or a heartbeat answer) and then UNAVAILABLE
// is failing, and must not hold the client in a reconnect storm. 10 s is
// longer than any such flapping and much shorter than an idle
// subscription's stream (kept open, silent, until the server recycles it
// minutes later). It is measured from the moment the stream opened, so
// gRPC's connect timeout (20 s) spent on an unreachable endpoint does not
// count.
const healthyAfter = 10 * time.Second

// giveUp is one stream's bound on a run of failures. A run starts when the
// stream loop starts or when a healthy stream (see healthyAfter) ends;
// once timeout has passed in a run, the next failure is terminal. The
// bound is checked after each failed attempt, and the last attempt is
// made at the deadline (runStream shortens the backoff delay to it), so
// the Source fails at most one attempt after it passes.
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

// failed records the end of an attempt (healthy: the stream was healthy,
// see healthyAfter) and returns an *UnreachableError when the run of
// failures has lasted timeout or more; nil otherwise.
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
