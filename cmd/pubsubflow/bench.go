package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func benchCommand() *cobra.Command {
	o := benchOptions{s: demoScenario()}
	o.s.progress = progressLines
	o.s.progressEvery = 2 * o.s.progressEvery
	c := newCommand("bench [flags]", "a load run; --compare-naive runs the demand-driven tracker too", `
Publishes --messages to an embedded Pub/Sub server (or to --topic, and
consumes --subscription on real Pub/Sub or PUBSUB_EMULATOR_HOST), consumes
them with --parallelism workers whose handler takes --handler-delay, on
--streams streams, and reports throughput, processing latency (receipt →
handled) and ack latency (ack → its Acknowledge RPC returned) percentiles,
redeliveries, expirations and peak outstanding (the client's sampled every
100 ms).

--compare-naive runs, after ours, the demand-driven tracker (a
subscriber that takes a message's lease only when a worker pulls the
message, not on receipt) on the same load, for at most twice ours' wall
time plus 10 s (it may never finish). With the defaults ours holds 1000
leased messages, the last waiting ≈ 25 s with a 10 s ack deadline, and
redelivers nothing; the naive shape leaves the messages that gRPC flow
control lets the server send ahead (all 1000 here) unleased in the
stream's buffers, so they expire and are redelivered, again and again. A
fast handler hides the bug: what waits unleased must wait longer than
the deadline.

--plot FILE.svg (or .png) draws outstanding, buffered, processing,
redeliveries and acks over time, one panel per run.

--trace FILE traces the runs with OpenTelemetry (our publisher and
Subscriber; the naive shape is not traced) and writes every span to FILE
as one JSON object per line: name, trace_id, span_id, parent_span_id,
kind, scope, start, end, duration_ns, status, status_description,
attributes, events, links. No collector is needed; jq reads it.`, nArgs(0, "no arguments"), func(ctx context.Context, env cliEnv, _ []string) error {
		return runBench(ctx, env, o)
	})
	fs := c.Flags()
	o.s.register(fs)
	o.ep.register(fs)
	fs.BoolVar(&o.compareNaive, "compare-naive", false, "also run the demand-driven tracker shape and compare")
	fs.StringVar(&o.plot, "plot", "", "write a plot of each run over time to this .svg or .png file")
	fs.StringVar(&o.subscription, "subscription", "", "consume this subscription instead of the embedded server's")
	fs.StringVar(&o.topic, "topic", "", "with --subscription: publish each run's messages to this topic first")
	fs.StringVar(&o.trace, "trace", "", "trace the runs (publisher and subscriber) and write every span to this file as JSON lines")
	completeFlag(c, "subscription", subscriptionResource.complete(&o.ep, false))
	completeFlag(c, "topic", topicResource.complete(&o.ep, false))
	return c
}

type benchOptions struct {
	s            scenario
	ep           endpointFlags
	compareNaive bool
	plot         string
	subscription string
	topic        string
	trace        string
}

// validate checks the flags and resolves --subscription and --topic to
// full names.
func (o *benchOptions) validate() error {
	if err := o.s.validate(); err != nil {
		return err
	}
	if o.plot != "" {
		if err := checkPlotFile(o.plot); err != nil {
			return err
		}
	}
	if o.topic != "" && o.subscription == "" {
		return usagef("--topic needs --subscription")
	}
	if o.subscription == "" {
		return nil
	}
	if o.s.inMemory {
		return usagef("--in-memory is for the embedded server, not --subscription")
	}
	if o.compareNaive && o.topic == "" {
		return usagef("--compare-naive with --subscription needs --topic, to publish each run's messages")
	}
	if err := o.ep.validate(); err != nil {
		return err
	}
	var err error
	if o.subscription, err = o.ep.resolve("subscriptions", o.subscription); err != nil {
		return err
	}
	if o.topic != "" {
		o.topic, err = o.ep.resolve("topics", o.topic)
	}
	return err
}

// shapes are the consumer shapes bench knows.
const (
	shapeOurs  = "ours (leases on receipt)"
	shapeNaive = "naive (demand-driven tracker)"
)

// shapeLabels label the shapes' progress, in one width.
var shapeLabels = map[string]string{shapeOurs: "ours ", shapeNaive: "naive"}

// runBench runs the shapes in turn on the same load, then prints the
// table, the redelivery comparison and the plot. Its phases are functions
// of their own so that each reads on its own: tracing, the runs, and what
// is reported from them.
func runBench(ctx context.Context, env cliEnv, o benchOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	if o.trace != "" {
		tp, shutdown, err := openTraceFile(o.trace)
		if err != nil {
			return err
		}
		defer func() {
			if err := shutdown(); err != nil {
				fmt.Fprintf(env.stderr, "bench: writing %s: %v\n", o.trace, err)
			}
		}()
		o.s.tracer = tp
	}
	fmt.Fprintf(env.stdout, "bench: %d messages of %d bytes, %d workers × %v handler, %d stream(s), ack deadline %v, max outstanding %d\n",
		o.s.messages, o.s.size, o.s.parallelism, o.s.handlerDelay, o.s.streams, o.s.ackDeadline, o.s.maxOutstanding)
	runs, err := benchShapes(ctx, env, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.stdout)
	if err := benchTable(runs).write(env.stdout); err != nil {
		return err
	}
	if o.compareNaive && len(runs) == 2 {
		writeRedelivered(env.stdout, runs[0].redelivered(), runs[1].redelivered())
	}
	return benchErrors(env, o.plot, runs)
}

// benchShapes runs ours, then with --compare-naive the naive shape, and
// returns their results; it stops early once ctx ends. A run's own
// failure is in its result, so that the others are still reported; err is
// a run that could not start.
func benchShapes(ctx context.Context, env cliEnv, o benchOptions) ([]runResult, error) {
	shapes := []string{shapeOurs}
	if o.compareNaive {
		shapes = append(shapes, shapeNaive)
	}
	var runs []runResult
	for _, shape := range shapes {
		s := o.s
		if shape == shapeNaive && len(runs) > 0 {
			// The naive shape may never finish (redelivered copies queue
			// behind stale ones): give it a bounded multiple of ours.
			s.timeout = min(s.timeout, naiveLimit(runs[0].wall))
		}
		r, err := benchRun(ctx, env, o, s, shape)
		if err != nil {
			return nil, err
		}
		if shape == shapeNaive && r.timedOut && ctx.Err() == nil {
			r.err, r.gaveUp = nil, true
		}
		runs = append(runs, r)
		if ctx.Err() != nil {
			break
		}
	}
	return runs, nil
}

// writeRedelivered compares the two shapes' redeliveries, and says why
// when this load shows no difference, so that an equal count is not read
// as the tracker making no difference.
func writeRedelivered(w io.Writer, ours, naive int64) {
	if naive > ours {
		fmt.Fprintf(w, "\nours: %d redelivered; naive: %d redelivered — the naive shape leases a message only when a worker asks for it.\n", ours, naive)
	} else {
		fmt.Fprintf(w, "\nours: %d redelivered; naive: %d redelivered — this load does not expose the demand-driven tracker: "+
			"messages must wait in the stream's buffers longer than the ack deadline (a slower handler per message does it).\n", ours, naive)
	}
}

// benchErrors writes the plot (to plot, if set) and joins the runs'
// errors with the plot's: a failed run still gets its plot.
func benchErrors(env cliEnv, plot string, runs []runResult) error {
	var errs []error
	for _, r := range runs {
		errs = append(errs, r.err)
	}
	if plot != "" {
		if err := writePlot(plot, runs); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(env.stdout, "plot written to %s\n", plot)
		}
	}
	return errors.Join(errs...)
}

// naiveLimit is how long the naive run may take, given ours' wall time:
// twice as long, plus 10 s.
func naiveLimit(ours time.Duration) time.Duration { return 2*ours + 10*time.Second }

// newConsumer makes the consumer of a shape.
func newConsumer(ctx context.Context, shape string, conn grpc.ClientConnInterface, sub string, s scenario, m *meter) (consumer, error) {
	if shape == shapeNaive {
		return newNaive(conn, sub, s, m), nil
	}
	return newOurs(ctx, conn, sub, s, m)
}

// benchRun runs one shape on a fresh embedded server, or on
// --subscription after publishing to --topic when given.
func benchRun(ctx context.Context, env cliEnv, o benchOptions, s scenario, shape string) (runResult, error) {
	t := &target{m: newMeter(s.handlerDelay), topic: o.topic, sub: o.subscription}
	var err error
	if o.subscription == "" {
		t, err = startEmbedded(ctx, s)
	} else {
		t.conn, _, err = o.ep.open(ctx, "subscriptions", t.sub, grpc.WithChainUnaryInterceptor(t.m.interceptor))
	}
	if err != nil {
		return runResult{}, err
	}
	defer t.close()
	if t.topic != "" {
		if err := publishBacklog(ctx, t.conn, t.topic, s.messages, s.size, s.tracer); err != nil {
			return runResult{}, err
		}
	}
	c, err := newConsumer(ctx, shape, t.conn, t.sub, s, t.m)
	if err != nil {
		return runResult{}, err
	}
	fmt.Fprintf(env.stdout, "run: %s\n", shape)
	prog := newProgress(env.stdout, s.progress, int64(s.messages), shapeLabels[shape], s.progressEvery)
	return drive(ctx, shape, c, t.m, t.srv, t.sub, s.messages, s.timeout, prog), nil
}

// benchTable lays the runs side by side.
func benchTable(runs []runResult) *table {
	var t table
	head := []any{""}
	for _, r := range runs {
		head = append(head, r.name)
	}
	t.row(head...)
	add := func(name string, f func(r *runResult) any) {
		cells := []any{name}
		for i := range runs {
			cells = append(cells, f(&runs[i]))
		}
		t.row(cells...)
	}
	server := func(f func(st *pubsubtest.SubStats) int64) func(r *runResult) any {
		return func(r *runResult) any {
			if r.server == nil {
				return "n/a"
			}
			return f(r.server)
		}
	}
	add("messages handled", func(r *runResult) any { return r.handled })
	add("deliveries (server)", server(func(st *pubsubtest.SubStats) int64 { return st.Delivered }))
	add("acked (server)", server(func(st *pubsubtest.SubStats) int64 { return st.Acked }))
	add("redelivered", func(r *runResult) any { return r.redelivered() })
	add("expired (server)", server(func(st *pubsubtest.SubStats) int64 { return st.Expired }))
	add("handled twice or more", func(r *runResult) any { return r.duplicates })
	add("peak outstanding (client)", func(r *runResult) any { return r.peakOutstanding })
	add("peak outstanding (server)", server(func(st *pubsubtest.SubStats) int64 { return st.MaxOutstanding }))
	add("throughput", func(r *runResult) any { return rate(r.throughput()) })
	add("wall time", func(r *runResult) any { return seconds(r.wall) })
	add("processing p50/p90/p99", func(r *runResult) any { return pct(r.processing) })
	add("ack latency p50/p90/p99", func(r *runResult) any { return pct(r.ack) })
	add("result", func(r *runResult) any {
		switch {
		case r.err != nil:
			return "FAILED"
		case r.gaveUp:
			return fmt.Sprintf("stopped after %s, %d of %d acked", seconds(r.wall), r.acked(), r.messages)
		}
		return "ok"
	})
	return &t
}

func pct(p percentiles) string {
	if p.n == 0 {
		return "n/a"
	}
	return millis(p.p50) + " / " + millis(p.p90) + " / " + millis(p.p99)
}
