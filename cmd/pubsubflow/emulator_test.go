package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

var listening = regexp.MustCompile(`listening on (\S+)`)

// waitListening returns the address the emulator printed.
func waitListening(t testing.TB, out *syncBuffer, exited func() bool) string {
	t.Helper()
	var addr string
	waitFor(t, "the emulator's address", func() bool {
		if exited() {
			t.Fatalf("the emulator exited:\n%s", out.String())
		}
		m := listening.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// The emulator as a subprocess, driven by Google's official Go client
// through PUBSUB_EMULATOR_HOST: topic and subscription created through the
// API, a publish whose first call fails (injected UNAVAILABLE, retried by
// the client), every message received and acked while streams are killed
// every 300 ms; counter lines show it; SIGTERM stops it cleanly (exit 0).
func TestEmulatorWithGoogleClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "emulator", "--addr", "127.0.0.1:0", "--stats-every", "100ms",
		"--fail", "Publish=1:UNAVAILABLE", "--kill-streams-every", "300ms")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop := func() error {
		var err error
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			err = <-exited
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	hasExited := func() bool {
		select {
		case err := <-exited:
			exited <- err
			return true
		default:
			return false
		}
	}
	addr := waitListening(t, &out, hasExited)
	t.Setenv("PUBSUB_EMULATOR_HOST", addr)

	const project, n = "emu-project", 20
	c, err := pubsub.NewClient(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic, sub := "projects/"+project+"/topics/events", "projects/"+project+"/subscriptions/events-sub"
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher(topic)
	var results []*pubsub.PublishResult
	for i := range n {
		results = append(results, pub.Publish(ctx, &pubsub.Message{Data: []byte(strconv.Itoa(i))}))
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	pub.Stop()

	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	received := make(chan error, 1)
	go func() {
		received <- c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			mu.Lock()
			defer mu.Unlock()
			seen[string(m.Data)] = true
		})
	}()
	waitFor(t, "every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
	// Keep receiving until a stream was killed and the client opened
	// another one.
	reopened := regexp.MustCompile(`streams \d+ open / ([2-9]|\d\d+) opened`)
	waitFor(t, "a killed stream and a new one", func() bool {
		o := out.String()
		return strings.Contains(o, "fault: ended 1 streams") && reopened.MatchString(o)
	})
	rcancel()
	if err := <-received; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive: %v", err)
	}
	waitFor(t, "a counter line with every ack", func() bool {
		return strings.Contains(out.String(), "acked "+strconv.Itoa(n)+",")
	})
	if err := stop(); err != nil {
		t.Fatalf("emulator exit after SIGTERM: %v\nstderr:\n%s", err, errOut.String())
	}
	o := out.String()
	for _, want := range []string{
		"export PUBSUB_EMULATOR_HOST=" + addr,
		"fault: the next 1 Publish calls fail with Unavailable",
		"Publish 2 (1 errors, 1 injected)",
		"pubsubflow emulator: stopped",
	} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
}

// startEmulator runs "pubsubflow emulator" with extra flags in-process
// on a free port and returns its address, its output, and stop, which
// cancels its context (as SIGINT would) and returns its exit code; the
// test's cleanup stops it too.
func startEmulator(t testing.TB, extra ...string) (addr string, out *syncBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, done := new(syncBuffer), make(chan int, 1)
	go func() {
		args := append([]string{"emulator", "--addr", "127.0.0.1:0", "--stats-every", "0"}, extra...)
		done <- run(ctx, args, strings.NewReader(""), out, out)
	}()
	stop = sync.OnceValue(func() int { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	return waitListening(t, out, func() bool { return len(done) > 0 }), out, stop
}

// The emulator in-process serves our own publish and tail commands, and
// returns 0 when its context ends.
func TestEmulatorServesPublishAndTail(t *testing.T) {
	ctx := t.Context()
	addr, out, stop := startEmulator(t)

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	topic, sub := "projects/p-1/topics/lines", "projects/p-1/subscriptions/lines-sub"
	if _, err := pubsubpb.NewPublisherClient(conn).CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := pubsubpb.NewSubscriberClient(conn).CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PUBSUB_EMULATOR_HOST", addr)
	code, stdout, stderr := cli(t, "one\ntwo\n", "publish", topic)
	if code != exitOK || len(strings.Fields(stdout)) != 2 {
		t.Fatalf("publish: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = cli(t, "", "tail", sub, "--ack", "--max", "2")
	if lines := parseTail(t, stdout); code != exitOK || len(lines) != 2 {
		t.Fatalf("tail: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code := stop(); code != exitOK || !strings.Contains(out.String(), "pubsubflow emulator: stopped") {
		t.Fatalf("emulator exit %d:\n%s", code, out.String())
	}
}

// --stall holds back the answer of exactly every K-th Publish call (the
// call's messages are stored at once) and says so, and the counter line
// counts the stalled calls.
func TestEmulatorStallFlag(t *testing.T) {
	ctx := t.Context()
	const stall = 300 * time.Millisecond
	addr, out, stop := startEmulator(t, "--stall", "Publish=2:300ms")
	if !strings.Contains(out.String(), "fault: 1 in every 2 Publish calls answers after 300ms") {
		t.Errorf("the emulator does not say its fault:\n%s", out.String())
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub := pubsubpb.NewPublisherClient(conn)
	topic := "projects/p-1/topics/stalled"
	if _, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	req := &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}}
	for i := 1; i <= 4; i++ {
		start := time.Now()
		if _, err := pub.Publish(ctx, req); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); i%2 == 0 && took < stall {
			t.Errorf("call %d took %v, want at least %v", i, took, stall)
		}
	}
	if code := stop(); code != exitOK || !strings.Contains(out.String(), "Publish 4 (2 stalled)") {
		t.Fatalf("emulator exit %d, want the counters to show 2 of 4 Publish calls stalled:\n%s", code, out.String())
	}
}

// The emulator's memory bound: with --max-backlog-bytes, Publish fails with
// RESOURCE_EXHAUSTED once the unacknowledged messages reach it, the
// emulator keeps serving, and every message accepted is delivered.
func TestEmulatorBacklogBound(t *testing.T) {
	ctx := t.Context()
	addr, out, stop := startEmulator(t, "--max-backlog-bytes", "20000")
	if !strings.Contains(out.String(), "backlog bound: 20000 bytes") {
		t.Errorf("the emulator does not say its bound:\n%s", out.String())
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub, sub := pubsubpb.NewPublisherClient(conn), pubsubpb.NewSubscriberClient(conn)
	topic, subName := "projects/p/topics/orders", "projects/p/subscriptions/billing"
	if _, err := pub.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: subName, Topic: topic}); err != nil {
		t.Fatal(err)
	}
	accepted := map[string]bool{}
	for len(accepted) <= 20 {
		resp, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: make([]byte, 1000)}}})
		if status.Code(err) == codes.ResourceExhausted {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		accepted[resp.MessageIds[0]] = true
	}
	if len(accepted) == 0 || len(accepted) > 20 {
		t.Fatalf("%d messages of 1000 bytes accepted under a bound of 20000 bytes", len(accepted))
	}
	resp, err := sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: subName, MaxMessages: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.ReceivedMessages {
		delete(accepted, m.Message.MessageId)
	}
	if len(accepted) != 0 || len(resp.ReceivedMessages) == 0 {
		t.Errorf("accepted but not delivered: %v", accepted)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("emulator exit %d:\n%s", code, out.String())
	}
}
