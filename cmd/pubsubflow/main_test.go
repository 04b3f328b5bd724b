package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// helperEnv makes the test binary act as the pubsubflow command (see
// TestMain), so a test can run the CLI as a subprocess without building it.
const helperEnv = "PUBSUBFLOW_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(mainExit())
	}
	goleak.VerifyTestMain(m,
		// Started at init by go.opencensus.io, which Google's client imports.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		// Google's client leaves its stream keep-alive handler running up
		// to 10 s after Receive returns (until its next monitor tick).
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
	)
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cli runs the CLI in-process with stdin and returns its exit code and
// output.
func cli(t testing.TB, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return cliCtx(ctx, stdin, args...)
}

func cliCtx(ctx context.Context, stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb syncBuffer
	code = run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// testServer is a loopback pubsubtest server with topic "topic-a" and
// subscription "sub-a" in project "test-project".
type testServer struct {
	srv   *pubsubtest.Server
	topic string
	sub   string
}

func newTestServer(t testing.TB, sc pubsubtest.SubscriptionConfig) *testServer {
	t.Helper()
	srv, err := pubsubtest.NewServer(pubsubtest.WithDeliveryAttemptAlways())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	topic, err := srv.CreateTopic(ctx, "topic-a")
	if err != nil {
		t.Fatal(err)
	}
	sc.Name, sc.Topic = "sub-a", topic
	sub, err := srv.CreateSubscription(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{srv: srv, topic: topic, sub: sub}
}

// endpoint are the flags that point a command at the server.
func (s *testServer) endpoint() []string { return []string{"--endpoint", s.srv.Addr(), "--insecure"} }

// waitFor polls cond until it holds or 20 s have passed.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
