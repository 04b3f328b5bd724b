package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

const cliMessages = 20

// TestCLIPublishAndTail: the CLI's publish sends stdin lines with an
// attribute and an ordering key, printing one id each; tail --ack prints
// them as JSON lines, in order, everything intact, and acks them (nothing
// comes back after the ack deadline).
func TestCLIPublishAndTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	sub := e.subscription(t, topic, &pubsubpb.Subscription{EnableMessageOrdering: true, AckDeadlineSeconds: 10})
	cli := buildCLI(t)

	var in strings.Builder
	for i := range cliMessages {
		fmt.Fprintf(&in, "line %d\n", i)
	}
	out := runCLI(t, cli, e.addr, in.String(), "publish", "--attr", "team=ops", "--ordering-key", "k1", topic)
	ids := strings.Fields(out)
	if len(ids) != cliMessages {
		t.Fatalf("publish printed %d ids, want %d:\n%s", len(ids), cliMessages, out)
	}

	out = runCLI(t, cli, e.addr, "", "tail", "--ack", "--max", fmt.Sprint(cliMessages), "--timeout", "60s", sub)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != cliMessages {
		t.Fatalf("tail printed %d lines, want %d:\n%s", len(lines), cliMessages, out)
	}
	for i, l := range lines {
		var m struct {
			ID          string            `json:"id"`
			Attributes  map[string]string `json:"attributes"`
			OrderingKey string            `json:"ordering_key"`
			Data        string            `json:"data"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("tail line %d %q: %v", i, l, err)
		}
		if m.ID != ids[i] || m.Data != fmt.Sprintf("line %d", i) || m.Attributes["team"] != "ops" || m.OrderingKey != "k1" {
			t.Fatalf("tail line %d = %+v, want id %s, data %q, team=ops, key k1", i, m, ids[i], fmt.Sprintf("line %d", i))
		}
	}

	// Acked: for more than the 10 s ack deadline, nothing comes back.
	var back atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := e.google.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		back.Add(1)
		m.Ack()
	}); err != nil {
		t.Fatal(err)
	}
	if n := back.Load(); n != 0 {
		t.Fatalf("%d messages came back after tail --ack", n)
	}
}

// buildCLI builds cmd/pubsubflow into the test's temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "pubsubflow")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/pubsubflow/pubsubflow/cmd/pubsubflow")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/pubsubflow: %v\n%s", err, out)
	}
	return bin
}

// runCLI runs the CLI against the emulator at addr and returns its stdout;
// a non-zero exit fails the test with its stderr.
func runCLI(t *testing.T, bin, addr, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "PUBSUB_EMULATOR_HOST="+addr)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("pubsubflow %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
