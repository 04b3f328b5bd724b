package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// feedEnv, when set to "TOTAL:PAYLOAD:LOW", makes the test binary serve the
// throughput benchmark's subscription from this process (see serveFeed),
// so the benchmark's own process holds only the client it measures.
const feedEnv = "PUBSUBFLOW_BENCH_FEED"

// serveFeed is the child process of BenchmarkThroughput: a pubsubtest
// server with topic "topic" and subscription "sub", prefilled with LOW + 10,000
// messages of PAYLOAD bytes. It prints "ADDR <address> <subscription>
// <project>" once ready and then obeys its standard input, a line at a
// time: "GO" starts the feeder, which keeps the backlog above LOW until
// TOTAL messages were published; "WAIT" waits until TOTAL messages were
// acked (at most 5 minutes) and prints "STATS <acked> <redelivered>
// <expired> <cpu-ns> <responses> <acknowledge-calls> <modack-calls>":
// cpu-ns is the CPU time the server process used since GO; the last three
// count the StreamingPull responses it sent and the Acknowledge and
// ModifyAckDeadline calls it served. It exits when its input closes.
func serveFeed() int {
	var total, payload, low int
	if _, err := fmt.Sscanf(os.Getenv(feedEnv), "%d:%d:%d", &total, &payload, &low); err != nil {
		fmt.Fprintln(os.Stderr, "bench feed server:", err)
		return 2
	}
	srv, err := pubsubtest.NewServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench feed server:", err)
		return 1
	}
	defer srv.Close()
	e := &env{srv: srv}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if e.topic, err = srv.CreateTopic(ctx, "topic"); err == nil {
		e.sub, err = srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic", AckDeadline: 60 * time.Second})
	}
	f := &feeder{e: e, total: total, payload: payload, low: low, chunk: 10000}
	if err == nil {
		f.sent = min(f.total, f.low+f.chunk)
		err = e.publishErr(f.sent, payload)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench feed server:", err)
		return 1
	}
	fmt.Printf("ADDR %s %s %s\n", srv.Addr(), e.sub, srv.Project())
	feedErr := make(chan error, 1)
	in := bufio.NewScanner(os.Stdin)
	var cpu0 time.Duration
	for in.Scan() {
		switch in.Text() {
		case "GO":
			cpu0 = ProcessCPU()
			go func() { feedErr <- f.run(ctx) }()
		case "WAIT":
			deadline := time.Now().Add(5 * time.Minute)
			for e.stats().Acked < int64(total) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			st := e.stats()
			var resps int64
			for _, si := range srv.Streams(e.sub) {
				resps += si.Responses
			}
			fmt.Printf("STATS %d %d %d %d %d %d %d\n", st.Acked, st.Redelivered, st.Expired, ProcessCPU()-cpu0,
				resps, srv.MethodStats("Acknowledge").Calls, srv.MethodStats("ModifyAckDeadline").Calls)
		}
	}
	cancel()
	select {
	case err := <-feedErr:
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench feed server:", err)
			return 1
		}
	default:
	}
	return 0
}

// childServer is the parent's handle on a child process serving a
// subscription (serveFeed, serveBacklog); it is a target. The child prints
// "ADDR <address> <subscription> <project>" once ready, reads commands a
// line at a time, answers "STATS <acked> <redelivered> <expired>" to WAIT
// and when its input closes, then exits.
type childServer struct {
	cmd               *exec.Cmd
	stdin             io.WriteCloser
	out               *bufio.Scanner
	addr, sub, projID string
	cpu               time.Duration // the server's CPU time, from the last STATS that told it
	// responses sent and Acknowledge and ModifyAckDeadline calls served,
	// from the last STATS that told them (all since the server started)
	responses, acks, modacks int64
}

// startChild re-runs this test binary with env (NAME=VALUE) set, which
// makes TestMain serve instead of testing.
func startChild(tb testing.TB, env string) *childServer {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &childServer{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	tb.Cleanup(func() {
		_ = s.stdin.Close()
		_ = s.cmd.Wait()
	})
	for s.out.Scan() {
		if f := strings.Fields(s.out.Text()); len(f) == 4 && f[0] == "ADDR" {
			s.addr, s.sub, s.projID = f[1], f[2], f[3]
			return s
		}
	}
	tb.Fatalf("bench server did not start: %v", s.out.Err())
	return nil
}

func (s *childServer) send(tb testing.TB, line string) {
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		tb.Fatal(err)
	}
}

// stats reads the child's next STATS line: three counters, and from a
// feed server also its CPU time, responses, Acknowledge and
// ModifyAckDeadline calls.
func (s *childServer) stats(tb testing.TB) (acked, redelivered, expired int64) {
	for s.out.Scan() {
		f := strings.Fields(s.out.Text())
		if len(f) < 4 || f[0] != "STATS" {
			continue
		}
		v := make([]int64, 7)
		for i := range min(len(f)-1, len(v)) {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				tb.Fatalf("bench server: bad STATS line %q", s.out.Text())
			}
			v[i] = n
		}
		s.cpu, s.responses, s.acks, s.modacks = time.Duration(v[3]), v[4], v[5], v[6]
		return v[0], v[1], v[2]
	}
	tb.Fatalf("bench server: no STATS: %v", s.out.Err())
	return 0, 0, 0
}

// waitAcked waits until the feed server has every ack and returns its
// counters.
func (s *childServer) waitAcked(tb testing.TB) (acked, redelivered, expired int64) {
	s.send(tb, "WAIT")
	return s.stats(tb)
}

// stop closes the child's input and returns its final counters.
func (s *childServer) stop(tb testing.TB) (acked, redelivered, expired int64) {
	tb.Helper()
	_ = s.stdin.Close()
	acked, redelivered, expired = s.stats(tb)
	if err := s.cmd.Wait(); err != nil {
		tb.Errorf("bench server: %v", err)
	}
	return acked, redelivered, expired
}

func (s *childServer) dial(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	return cc
}

func (s *childServer) subscription() string { return s.sub }
func (s *childServer) project() string      { return s.projID }
