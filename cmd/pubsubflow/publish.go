package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/publisher"
)

// Bounds of the publish command.
const (
	// publishWindow bounds the lines published and not yet reported (an
	// id waits for the lines before it, to keep the input order).
	publishWindow = 1000
	// defaultDrainTimeout bounds the wait, after a signal, for the lines
	// already read to be published.
	defaultDrainTimeout = 30 * time.Second
)

func publishCommand() *cobra.Command {
	o := publishOptions{attrs: map[string]string{}}
	c := newCommand("publish [flags] TOPIC", "publish each stdin line as a message; print the ids", publishHelp(),
		nArgs(1, "TOPIC"), func(ctx context.Context, env cliEnv, args []string) error {
			if v := limits.CheckMessage([]byte("x"), o.attrs, o.orderingKey); v != nil {
				return usagef("%s: %s: %s", flagOf(v.Field), v.Limit, v.Detail)
			}
			if o.drain <= 0 {
				return usagef("--drain-timeout %v: want > 0", o.drain)
			}
			return runPublish(ctx, env, args[0], o)
		})
	fs := c.Flags()
	o.ep.register(fs)
	fs.Func("attr", "attribute KEY=VALUE on every message (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want KEY=VALUE", s)
		}
		o.attrs[k] = v
		return nil
	})
	fs.StringVar(&o.orderingKey, "ordering-key", "", "ordering key of every message (enables ordered publishing)")
	fs.DurationVar(&o.drain, "drain-timeout", defaultDrainTimeout, "after SIGINT or SIGTERM, how long to wait for the lines already read to be published")
	c.ValidArgsFunction = topicResource.complete(&o.ep, true)
	return c
}

func publishHelp() string {
	return fmt.Sprintf(`
Publishes each line of standard input as one message to TOPIC
(projects/P/topics/T, or T with --project) and prints each message id on
its own line, in input order. A line is sent byte for byte: only the "\n"
that ends it is removed (a "\r" before it is kept), and a last line
without "\n" is sent too. Empty lines are skipped unless the messages
carry attributes.

A line may be up to %s bytes: a publish request holds at most %s
bytes encoded, and its own encoding, with the longest topic name, takes
the rest. Each --attr K=V takes len(K)+len(V)+6 bytes off that (up to 9
for long ones), --ordering-key its length +2 (+3 over 127 bytes). A
longer line stops the command with exit code 1 after the lines before it.
--attr and --ordering-key are checked against the service's limits
before anything is read.

Each line read ends as exactly one id on stdout or one "line N: ..." on
stderr; a line that failed makes the exit code 1. SIGINT or SIGTERM
(Ctrl-C) stops the reading of stdin: the lines already read are
published (for up to --drain-timeout; a line still unconfirmed then is
reported as not confirmed, as the server may or may not have it), a last
stderr line names the last line read, and the exit code is 130. A second
signal ends the command at once.

`, grouped(maxLineBytes(nil, "")), grouped(limits.MaxRequestBytes)) + limitsHelp()
}

type publishOptions struct {
	ep          endpointFlags
	attrs       map[string]string
	orderingKey string
	drain       time.Duration
}

// message is what every message carries but its data.
func (o publishOptions) message() publisher.Message {
	m := publisher.Message{Attributes: o.attrs, OrderingKey: o.orderingKey}
	if len(m.Attributes) == 0 {
		m.Attributes = nil
	}
	return m
}

func runPublish(ctx context.Context, env cliEnv, name string, o publishOptions) error {
	conn, topic, err := o.ep.open(ctx, "topics", name)
	if err != nil {
		return err
	}
	defer conn.Close()
	pub, err := publisher.New(conn, topic, publisher.Config{EnableOrdering: o.orderingKey != ""})
	if err != nil {
		return err
	}
	drainCtx, release := drainContext(ctx, o.drain, func() {
		fmt.Fprintf(env.stderr, "pubsubflow publish: interrupted: reading no more of stdin; waiting up to %v for the lines read (signal again to quit now)\n", o.drain)
	})
	defer release()
	quit := make(chan struct{})
	defer close(quit)
	tmpl := o.message()
	lines := readLines(env.stdin, maxLineBytes(tmpl.Attributes, tmpl.OrderingKey), quit)
	rep := startReport(env, drainCtx)
	last, end := feed(ctx, pub, lines, rep, tmpl)
	shutErr := pub.Shutdown(drainCtx) // every line's Result has settled when it returns
	rep.wait()
	var readErr error
	if end != nil && end != io.EOF {
		readErr = end
	}
	if ctx.Err() != nil {
		rep.summary(last, end, o.drain)
		return ctx.Err() // run reports the interrupt (exit 130)
	}
	if rep.failed > 0 {
		return errors.Join(readErr, fmt.Errorf("%d messages failed to publish", rep.failed))
	}
	return errors.Join(readErr, shutErr)
}

// feed publishes the lines until stdin ends (it returns io.EOF), a line
// cannot be read (that error) or ctx is done (nil), handing each line's
// Result to rep, and returns the number of the last line sent or skipped.
func feed(ctx context.Context, pub *publisher.Publisher, lines <-chan stdinLine, rep *report, tmpl publisher.Message) (last int, end error) {
	for rep.reserve(ctx) {
		var l stdinLine
		select {
		case l = <-lines:
		case <-ctx.Done():
		}
		if ctx.Err() != nil { // a select picks at random among ready cases
			rep.unreserve()
			return last, nil
		}
		if l.err != nil {
			rep.unreserve()
			return last, l.err
		}
		if len(l.data) == 0 && tmpl.Attributes == nil {
			rep.unreserve()
			last = l.n
			continue // Pub/Sub refuses a message with neither data nor attributes
		}
		m := tmpl
		m.Data = l.data
		r := pub.Publish(ctx, &m)
		if notQueued(ctx, r) {
			rep.unreserve()
			return last, nil
		}
		last = l.n
		rep.add(l.n, r)
	}
	return last, nil
}

// notQueued reports a Publish refused because ctx was done while it
// waited for flow control: that message was never sent. (A queued
// message's Result cannot carry ctx's error: the Publisher does not see
// ctx once it has queued the message.)
func notQueued(ctx context.Context, r *publisher.Result) bool {
	if ctx.Err() == nil {
		return false
	}
	select {
	case <-r.Ready():
		_, err := r.Get(ctx)
		return errors.Is(err, ctx.Err())
	default:
		return false
	}
}

// errDrainTimeout is the cause of the drain context once --drain-timeout
// has passed after a signal.
var errDrainTimeout = errors.New("--drain-timeout passed")

// drainContext returns a context that ends drain after ctx is done (the
// first signal; onSignal runs then), with the cause errDrainTimeout, or
// when release is called. release returns once onSignal, if it runs, has
// returned.
func drainContext(ctx context.Context, drain time.Duration, onSignal func()) (context.Context, func()) {
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-dctx.Done():
			return
		}
		if dctx.Err() != nil {
			return
		}
		onSignal()
		t := time.NewTimer(drain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(errDrainTimeout)
		case <-dctx.Done():
		}
	})
	return dctx, func() { cancel(context.Canceled); wg.Wait() }
}

// report prints each published line's outcome in input order: its id on
// stdout or a "line N:" failure on stderr.
type report struct {
	env     cliEnv
	drain   context.Context // see drainContext
	slots   chan struct{}   // the window: one per line published and not yet reported
	results chan pending
	done    chan struct{}
	// Counted by the printing goroutine; read after wait.
	published, failed, unconfirmed int
}

type pending struct {
	line int
	r    *publisher.Result
}

func startReport(env cliEnv, drain context.Context) *report {
	r := &report{env: env, drain: drain, slots: make(chan struct{}, publishWindow),
		results: make(chan pending, publishWindow), done: make(chan struct{})}
	go r.print()
	return r
}

// reserve takes a place in the window for the next line, waiting while
// publishWindow lines wait to be reported; false once ctx is done.
func (r *report) reserve(ctx context.Context) bool {
	select {
	case r.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *report) unreserve() { <-r.slots }

// add hands a published line over; it never blocks, as the line holds a
// place in the window.
func (r *report) add(line int, res *publisher.Result) { r.results <- pending{line, res} }

// wait ends the report once every line added is printed.
func (r *report) wait() {
	close(r.results)
	<-r.done
}

func (r *report) print() {
	defer close(r.done)
	for p := range r.results {
		// Every queued message settles, within the Publisher's retry
		// deadline or when Shutdown abandons it at --drain-timeout.
		id, err := p.r.Get(context.Background())
		switch {
		case err == nil:
			r.published++
			fmt.Fprintln(r.env.stdout, id)
		case abandoned(r.drain, err):
			r.unconfirmed++
			fmt.Fprintf(r.env.stderr, "pubsubflow publish: line %d: not confirmed: abandoned when --drain-timeout passed (the server may or may not have it): %v\n", p.line, err)
		default:
			r.failed++
			fmt.Fprintf(r.env.stderr, "pubsubflow publish: line %d: %v\n", p.line, err)
		}
		r.unreserve()
	}
}

// abandoned reports a publish error caused by Shutdown abandoning the RPC
// or its retry when the drain timed out: the request may have reached the
// server.
func abandoned(drain context.Context, err error) bool {
	return context.Cause(drain) == errDrainTimeout && (errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled)
}

// summary is the last stderr line of an interrupted publish: how far
// stdin was read and what became of the lines.
func (r *report) summary(last int, end error, drain time.Duration) {
	where := fmt.Sprintf("stopped reading stdin after line %d", last)
	switch {
	case end == io.EOF:
		where = fmt.Sprintf("stdin was read to its end (line %d)", last)
	case end != nil:
		fmt.Fprintf(r.env.stderr, "pubsubflow publish: %v\n", end)
	}
	fmt.Fprintf(r.env.stderr, "pubsubflow publish: %s: %d published, %d failed, %d not confirmed within --drain-timeout %v\n",
		where, r.published, r.failed, r.unconfirmed, drain)
}

// flagOf names the flag that set a message field.
func flagOf(field string) string {
	if field == "OrderingKey" {
		return "--ordering-key"
	}
	return "--attr " + strings.TrimPrefix(field, "Attributes")
}
