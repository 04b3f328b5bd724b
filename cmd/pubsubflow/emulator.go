package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func emulatorCommand() *cobra.Command {
	o := emulatorOptions{killCode: codes.Unavailable}
	c := newCommand("emulator [flags]", "run pubsubtest as a standalone Pub/Sub emulator", `
Serves the Pub/Sub gRPC API (Publisher and Subscriber services) from the
strict in-process server pubsubtest, for any language's official client:

	export PUBSUB_EMULATOR_HOST=127.0.0.1:8085

Topics and subscriptions are created through the API, in any project. It
prints its address, one line of counters per --stats-every, and stops
cleanly on SIGINT or SIGTERM. It holds at most --max-backlog-bytes of
messages (unacknowledged, retained for Seek, or in snapshots, each copy
counted with a bookkeeping allowance): past that, Publish fails with
RESOURCE_EXHAUSTED and nothing already accepted is dropped. As the real
service, it sets a message's delivery attempt only on subscriptions with a
dead-letter policy. Faults can be injected: streams killed every
--kill-streams-every with --kill-code; a method's next N calls failed
(--fail Acknowledge=3:UNAVAILABLE); a method delayed (--latency
Publish=200ms); the answer of every K-th call of a method held back
(--stall Publish=100:2s stalls 1% of Publish calls for 2s; the call's
messages are stored at once, as by a slow service).`, nArgs(0, "no arguments"), func(ctx context.Context, env cliEnv, _ []string) error {
		return runEmulator(ctx, env, o)
	})
	fs := c.Flags()
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8085", "TCP address to listen on (port 0: any free port)")
	fs.DurationVar(&o.minAckDeadline, "min-ack-deadline", 10*time.Second, "smallest ack deadline accepted (the real service: 10s)")
	fs.IntVar(&o.perResponse, "max-messages-per-response", 100, "messages per StreamingPull response at most")
	fs.Int64Var(&o.maxBacklogBytes, "max-backlog-bytes", defaultMaxBacklogBytes, "bound on the bytes of messages held; Publish fails with RESOURCE_EXHAUSTED past it (0: no bound)")
	fs.DurationVar(&o.statsEvery, "stats-every", time.Minute, "interval of the counter lines (0: none)")
	fs.DurationVar(&o.killEvery, "kill-streams-every", 0, "end every open StreamingPull stream this often (0: never)")
	fs.Func("kill-code", "status code of killed streams (default UNAVAILABLE)", func(s string) error {
		code, err := parseCode(s)
		o.killCode = code
		return err
	})
	fs.Func("fail", "METHOD=N[:CODE]: fail METHOD's next N calls with CODE (default UNAVAILABLE); repeatable", func(s string) error {
		f, err := parseFail(s)
		o.fails = append(o.fails, f)
		return err
	})
	fs.Func("latency", "METHOD=DURATION: delay every call of METHOD; repeatable", func(s string) error {
		f, err := parseLatency(s)
		o.latencies = append(o.latencies, f)
		return err
	})
	fs.Func("stall", "METHOD=K:DURATION: hold back the answer of every K-th call of METHOD for DURATION; repeatable", func(s string) error {
		f, err := parseStall(s)
		o.stalls = append(o.stalls, f)
		return err
	})
	return c
}

// defaultMaxBacklogBytes is the emulator's default memory bound for
// messages, 512 MiB: well under a development machine's memory, and far
// more than a test's backlog.
const defaultMaxBacklogBytes = 512 << 20

type emulatorOptions struct {
	addr           string
	minAckDeadline time.Duration
	perResponse    int
	// maxBacklogBytes bounds the server's memory for messages (0: none).
	maxBacklogBytes int64
	statsEvery      time.Duration
	killEvery       time.Duration
	killCode        codes.Code
	fails           []fault
	latencies       []fault
	stalls          []fault
}

// fault is an injected fault: what it does to the server, and the line
// that says so.
type fault struct {
	apply func(srv *pubsubtest.Server)
	says  string
}

func (o *emulatorOptions) validate() error {
	switch {
	case o.minAckDeadline < 0 || o.minAckDeadline > 600*time.Second:
		return usagef("--min-ack-deadline %v: want 0–600s", o.minAckDeadline)
	case o.perResponse < 1:
		return usagef("--max-messages-per-response %d: want ≥ 1", o.perResponse)
	case o.maxBacklogBytes < 0:
		return usagef("--max-backlog-bytes %d: want ≥ 0", o.maxBacklogBytes)
	case o.statsEvery < 0:
		return usagef("--stats-every %v: want ≥ 0", o.statsEvery)
	case o.killEvery < 0:
		return usagef("--kill-streams-every %v: want ≥ 0", o.killEvery)
	}
	return nil
}

// pubsubMethods are the RPC names of the Publisher and Subscriber
// services, read from their descriptors so none is missed.
func pubsubMethods() []string {
	var out []string
	svcs := pubsubpb.File_google_pubsub_v1_pubsub_proto.Services()
	for i := range svcs.Len() {
		ms := svcs.Get(i).Methods()
		for j := range ms.Len() {
			out = append(out, string(ms.Get(j).Name()))
		}
	}
	slices.Sort(out)
	return out
}

// methodArg splits "METHOD=VALUE" (want names VALUE) and checks METHOD.
func methodArg(s, want string) (method, value string, err error) {
	method, value, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q: want METHOD=%s", s, want)
	case !slices.Contains(pubsubMethods(), method):
		return "", "", fmt.Errorf("unknown method %q (one of %s)", method, strings.Join(pubsubMethods(), ", "))
	}
	return method, value, nil
}

// parseCode accepts a gRPC code by name (UNAVAILABLE, unavailable) or
// number.
func parseCode(s string) (codes.Code, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n < 17 {
		return codes.Code(n), nil
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(s)))); err != nil {
		return 0, fmt.Errorf("unknown status code %q", s)
	}
	if c == codes.OK {
		return 0, fmt.Errorf("status code %q is not an error", s)
	}
	return c, nil
}

func parseFail(s string) (fault, error) {
	method, rest, err := methodArg(s, "N[:CODE]")
	if err != nil {
		return fault{}, err
	}
	nStr, codeStr, hasCode := strings.Cut(rest, ":")
	n, err := strconv.Atoi(nStr)
	if err != nil || n < 1 {
		return fault{}, fmt.Errorf("%q: N must be a positive integer", s)
	}
	code := codes.Unavailable
	if hasCode {
		if code, err = parseCode(codeStr); err != nil {
			return fault{}, err
		}
	}
	return fault{func(srv *pubsubtest.Server) { srv.FailNext(method, n, code) },
		fmt.Sprintf("the next %d %s calls fail with %v", n, method, code)}, nil
}

func parseLatency(s string) (fault, error) {
	method, dStr, err := methodArg(s, "DURATION")
	if err != nil {
		return fault{}, err
	}
	d, err := time.ParseDuration(dStr)
	if err != nil || d < 0 {
		return fault{}, fmt.Errorf("%q: bad duration", s)
	}
	return fault{func(srv *pubsubtest.Server) { srv.SetLatency(method, d) }, fmt.Sprintf("every %s call is delayed %v", method, d)}, nil
}

func parseStall(s string) (fault, error) {
	method, rest, err := methodArg(s, "K:DURATION")
	if err != nil {
		return fault{}, err
	}
	kStr, dStr, _ := strings.Cut(rest, ":")
	k, err := strconv.Atoi(kStr)
	if err != nil || k < 1 {
		return fault{}, fmt.Errorf("%q: K must be a positive integer", s)
	}
	d, err := time.ParseDuration(dStr)
	if err != nil || d <= 0 {
		return fault{}, fmt.Errorf("%q: bad duration", s)
	}
	return fault{func(srv *pubsubtest.Server) { srv.StallEvery(method, k, d) },
		fmt.Sprintf("1 in every %d %s calls answers after %v", k, method, d)}, nil
}

func runEmulator(ctx context.Context, env cliEnv, o emulatorOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	srv, err := pubsubtest.NewServer(
		pubsubtest.WithAddr(o.addr),
		pubsubtest.WithMinAckDeadline(o.minAckDeadline),
		pubsubtest.WithMaxMessagesPerResponse(o.perResponse),
		pubsubtest.WithMaxBacklogBytes(o.maxBacklogBytes),
		// Per-message counters of the last million messages only: without
		// a limit they would grow with every message ever published.
		pubsubtest.WithMessageStatsLimit(1<<20),
	)
	if err != nil {
		return err
	}
	faults := slices.Concat(o.fails, o.latencies, o.stalls)
	for _, f := range faults {
		f.apply(srv)
	}
	fmt.Fprintf(env.stdout, "pubsubflow emulator listening on %s\nexport PUBSUB_EMULATOR_HOST=%s\n", srv.Addr(), srv.Addr())
	if o.maxBacklogBytes > 0 {
		fmt.Fprintf(env.stdout, "backlog bound: %d bytes (--max-backlog-bytes)\n", o.maxBacklogBytes)
	}
	for _, f := range faults {
		fmt.Fprintf(env.stdout, "fault: %s\n", f.says)
	}
	if o.killEvery > 0 {
		fmt.Fprintf(env.stdout, "fault: every %v, open streams end with %v\n", o.killEvery, o.killCode)
	}

	stats, kill := ticker(o.statsEvery), ticker(o.killEvery)
	defer stats.Stop()
	defer kill.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(env.stdout, "pubsubflow emulator: stopping")
			printEmulatorStats(env.stdout, srv, start)
			if err := srv.Close(); err != nil {
				return fmt.Errorf("stopping: %w", err)
			}
			fmt.Fprintln(env.stdout, "pubsubflow emulator: stopped")
			return nil
		case <-stats.C:
			printEmulatorStats(env.stdout, srv, start)
		case <-kill.C:
			n := srv.KillStreams(o.killCode, "pubsubflow emulator: injected stream kill")
			fmt.Fprintf(env.stdout, "fault: ended %d streams with %v\n", n, o.killCode)
		}
	}
}

// ticker returns a running ticker, or a stopped one that never fires for
// d == 0.
func ticker(d time.Duration) *time.Ticker {
	if d <= 0 {
		t := time.NewTicker(time.Hour)
		t.Stop()
		return t
	}
	return time.NewTicker(d)
}

// printEmulatorStats prints one line of the server's counters: streams;
// deliveries, acks, redeliveries, expirations, outstanding messages and
// backlog summed over the subscriptions that were streamed from; and the
// calls and errors of the busiest methods.
func printEmulatorStats(w io.Writer, srv *pubsubtest.Server, start time.Time) {
	var open int64
	streams := srv.Streams("")
	subs := map[string]bool{}
	for _, st := range streams {
		if st.Open {
			open++
		}
		subs[st.Subscription] = true
	}
	// Per-subscription counters, summed over the subscriptions that were
	// ever streamed from (the server lists subscriptions only by project).
	var sum pubsubtest.SubStats
	for name := range subs {
		st := srv.SubscriptionStats(name)
		sum.Delivered += st.Delivered
		sum.Acked += st.Acked
		sum.Redelivered += st.Redelivered
		sum.Expired += st.Expired
		sum.Outstanding += st.Outstanding
		sum.Backlog += st.Backlog
	}
	var b strings.Builder
	fmt.Fprintf(&b, "stats +%v: streams %d open / %d opened; streamed subscriptions: delivered %d, acked %d, redelivered %d, expired %d, outstanding %d, backlog %d",
		time.Since(start).Round(time.Second), open, len(streams), sum.Delivered, sum.Acked, sum.Redelivered, sum.Expired, sum.Outstanding, sum.Backlog)
	b.WriteString("; calls:")
	for i, m := range []string{"Publish", "Acknowledge", "ModifyAckDeadline", "Pull"} {
		st := srv.MethodStats(m)
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %d", m, st.Calls)
		if st.Errors > 0 {
			fmt.Fprintf(&b, " (%d errors, %d injected)", st.Errors, st.Injected)
		}
		if st.Stalled > 0 {
			fmt.Fprintf(&b, " (%d stalled)", st.Stalled)
		}
	}
	if st := srv.MethodStats("StreamingPull"); st.Errors > 0 {
		fmt.Fprintf(&b, ", StreamingPull errors %d (%d injected)", st.Errors, st.Injected)
	}
	fmt.Fprintln(w, b.String())
}
