package suite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
)

// The scale-out test runs this test binary again as each subscriber
// process, with these variables set.
const (
	roleEnv         = "PUBSUBFLOW_SUITE_ROLE"
	roleSubscriber  = "subscriber"
	subscriptionEnv = "PUBSUBFLOW_SUITE_SUBSCRIPTION"
)

const (
	scaleOutProcesses = 3
	scaleOutMessages  = 20000
	// scaleOutTimeout bounds the whole run from the first publish to the
	// last handled message.
	scaleOutTimeout = 5 * time.Minute
)

// TestSubscriberProcessesShareBacklog: three subscriber processes on one
// subscription — the way users scale out — share a 20,000-message backlog:
// every message is handled, each process gets a share, and once they have
// stopped nothing comes back (every message was acked). Duplicates are
// counted and reported; at-least-once delivery allows them.
func TestSubscriberProcessesShareBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	// A 10 s deadline: an ack that never reached the server shows up as a
	// redelivery within the 20 s check below.
	sub := e.subscription(t, topic, &pubsubpb.Subscription{AckDeadlineSeconds: 10})
	ids := e.publish(t, topic, scaleOutMessages, 64)
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}

	ctx, cancel := context.WithTimeout(context.Background(), scaleOutTimeout)
	defer cancel()
	start := time.Now()
	procs := make([]*subProcess, scaleOutProcesses)
	lines := make(chan handled, 1024)
	for i := range procs {
		procs[i] = startSubProcess(t, ctx, i, e.addr, sub, lines)
	}

	s := newSeen()
	per := make([]int, scaleOutProcesses)
	for s.distinct() < scaleOutMessages {
		select {
		case h := <-lines:
			if !want[h.id] {
				t.Fatalf("process %d handled %q, which was not published", h.proc, h.id)
			}
			s.add(h.id)
			per[h.proc]++
		case <-ctx.Done():
			t.Fatalf("%d of %d messages handled within %v (per process %v)", s.distinct(), scaleOutMessages, scaleOutTimeout, per)
		}
	}
	took := time.Since(start)
	for _, p := range procs {
		p.stop()
	}
	for _, p := range procs {
		if err := p.wait(ctx); err != nil {
			t.Fatalf("process %d: %v\n%s", p.i, err, p.stderr())
		}
	}
	close(lines)
	for h := range lines { // what was handled while stopping
		s.add(h.id)
		per[h.proc]++
	}
	for i, n := range per {
		if n == 0 {
			t.Fatalf("process %d handled nothing (per process %v): the backlog was not shared", i, per)
		}
	}
	t.Logf("%d processes: %d messages handled in %v (%.0f msg/s), per process %v, %d duplicates",
		scaleOutProcesses, scaleOutMessages, took.Round(time.Millisecond), scaleOutMessages/took.Seconds(), per, s.duplicates())
	for _, p := range procs {
		t.Logf("process %d: %s", p.i, bytes.TrimSpace(p.stderrBytes()))
	}

	// Every message was acked: for twice the ack deadline, nothing comes back.
	var back atomic.Int64
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if err := e.google.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		back.Add(1)
		m.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	if n := back.Load(); n != 0 {
		t.Fatalf("%d messages came back after every process stopped: their acks were lost", n)
	}
}

// handled is one line of a subscriber process: it handled message id.
type handled struct {
	proc int
	id   string
}

// subProcess is one subscriber process (this test binary in the
// subscriber role) and its output.
type subProcess struct {
	i      int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    sync.WaitGroup // the stdout reader
	mu     sync.Mutex
	errBuf bytes.Buffer
}

func startSubProcess(t *testing.T, ctx context.Context, i int, addr, sub string, lines chan<- handled) *subProcess {
	t.Helper()
	p := &subProcess{i: i}
	p.cmd = exec.CommandContext(ctx, os.Args[0])
	p.cmd.Env = append(os.Environ(), roleEnv+"="+roleSubscriber, subscriptionEnv+"="+sub, "PUBSUB_EMULATOR_HOST="+addr)
	p.cmd.Stderr = lockedWriter{p}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	p.out.Add(1)
	go func() {
		defer p.out.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- handled{proc: i, id: sc.Text()}
		}
	}()
	return p
}

type lockedWriter struct{ p *subProcess }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.errBuf.Write(b)
}

func (p *subProcess) stderrBytes() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.errBuf.Bytes()...)
}

func (p *subProcess) stderr() string { return string(p.stderrBytes()) }

// stop asks the process to drain and exit: it stops when its stdin closes.
func (p *subProcess) stop() { _ = p.stdin.Close() }

// wait waits for the process to exit and its output to be read.
func (p *subProcess) wait(ctx context.Context) error {
	p.out.Wait() // stdout reaches EOF when the process exits (or ctx kills it)
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("%w (context: %v)", err, ctx.Err())
	}
	return nil
}

// subscriberMain is a subscriber process: our Subscriber on
// $PUBSUBFLOW_SUITE_SUBSCRIPTION via $PUBSUB_EMULATOR_HOST, 8 workers,
// printing each handled message id on stdout before its ack, until stdin
// closes (or SIGTERM). A summary goes to stderr.
func subscriberMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	sub, err := pubsubflow.NewSubscriber(ctx, os.Getenv(subscriptionEnv), pubsubflow.SubscriberConfig{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	flushed := make(chan struct{})
	go func() { // flush a few times a second so the parent sees progress
		defer close(flushed)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				mu.Lock()
				_ = out.Flush()
				mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	err = sub.Run(ctx, 8, func(_ context.Context, m *pubsubflow.Message) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := fmt.Fprintln(out, m.ID)
		return err
	})
	<-flushed
	mu.Lock()
	ferr := out.Flush()
	mu.Unlock()
	cerr := sub.Close()
	st := sub.Stats()
	fmt.Fprintf(os.Stderr, "received %d, acked %d, nacked %d, redelivered %d, expired %d, reconnects %d, ack failures %d\n",
		st.Received, st.Acked, st.Nacked, st.Redelivered, st.Expired, st.Reconnects, st.AckFailures)
	for _, err := range []error{err, ferr, cerr} {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
