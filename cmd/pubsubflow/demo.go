package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func demoCommand() *cobra.Command {
	s := demoScenario()
	c := newCommand("demo [flags]", "the subscriber against a slow handler, on an embedded server", `
Needs no flags and no credentials. Starts an embedded Pub/Sub server
(pubsubtest), publishes a backlog of --messages, and consumes it with a
Subscriber whose handler takes --handler-delay on --parallelism workers.
By default (1000 messages, 250 ms on 10 workers, the library's default
limits) the last buffered message waits about 25 s for a worker while the
stream ack deadline is 10 s: a tracker that leases messages only when the
handler asks for them lets what waits expire and be redelivered (see
'pubsubflow bench --compare-naive'); the Subscriber leases every message on
receipt, so it shows 0 redeliveries and 0 expirations. Live progress is a
bar on a terminal and plain lines otherwise; the run ends with a table
(the subscriber's peak outstanding there is sampled every 100 ms). Exit
code 1 if anything was redelivered or expired.`, nArgs(0, "no arguments"), func(ctx context.Context, env cliEnv, _ []string) error {
		return runDemo(ctx, env, s)
	})
	s.register(c.Flags())
	return c
}

func runDemo(ctx context.Context, env cliEnv, s scenario) error {
	if err := s.validate(); err != nil {
		return err
	}
	e, err := startEmbedded(ctx, s)
	if err != nil {
		return err
	}
	defer e.close()

	fmt.Fprintf(env.stdout, "pubsubflow demo: embedded Pub/Sub server on %s\n", e.srv.Addr())
	pubStart := time.Now()
	if err := publishBacklog(ctx, e.conn, e.topic, s.messages, s.size, s.tracer); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "published a backlog of %d messages in %s\n", s.messages, seconds(time.Since(pubStart)))
	fmt.Fprintf(env.stdout, "consuming: %d workers × %v handler, stream ack deadline %v, max outstanding %d, %d stream(s)\n",
		s.parallelism, s.handlerDelay, s.ackDeadline, s.maxOutstanding, s.streams)
	if wait := backlogWait(s); wait > s.ackDeadline {
		fmt.Fprintf(env.stdout, "the last buffered message waits ≈ %s for a worker > the %v deadline: only leasing on receipt keeps it\n",
			seconds(wait), s.ackDeadline)
	}

	c, err := newOurs(ctx, e.conn, e.sub, s, e.m)
	if err != nil {
		return err
	}
	prog := newProgress(env.stdout, s.progress, int64(s.messages), "demo", s.progressEvery)
	r := drive(ctx, "demo", c, e.m, e.srv, e.sub, s.messages, s.timeout, prog)
	st := c.sub.Stats()

	var t table
	t.row("", "subscriber", "server")
	t.row("published", "", r.server.Published)
	t.row("received", st.Received, r.server.Delivered)
	t.row("acked", st.Acked, r.server.Acked)
	t.row("redelivered", st.Redelivered, r.server.Redelivered)
	t.row("expired", st.Expired, r.server.Expired)
	t.row("peak outstanding", r.peakOutstanding, r.server.MaxOutstanding)
	t.row("throughput", rate(r.throughput()), "")
	t.row("wall time", seconds(r.wall), "")
	fmt.Fprintln(env.stdout)
	if err := t.write(env.stdout); err != nil {
		return err
	}
	if r.err != nil {
		return r.err
	}
	if r.server.Redelivered != 0 || r.server.Expired != 0 || st.Redelivered != 0 || st.Expired != 0 {
		return errors.New("messages were redelivered or expired: the subscriber let a lease lapse")
	}
	fmt.Fprintln(env.stdout, "\n0 redeliveries, 0 expirations: every message was leased from the moment it arrived.")
	return nil
}

// backlogWait is how long the last message of a full buffer waits for a
// worker: the messages held at once, times the handler delay, over the
// workers.
func backlogWait(s scenario) time.Duration {
	held := min(int64(s.messages), s.maxOutstanding)
	return time.Duration(held) * s.handlerDelay / time.Duration(s.parallelism)
}
