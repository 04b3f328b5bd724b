package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/gcemu"
)

// walkthrough is the README's "Local walkthrough": the command that
// starts the emulator, the variables the second terminal exports, and the
// commands it runs.
type walkthrough struct {
	server string
	env    map[string]string
	steps  []string
}

// readWalkthrough reads the walkthrough from the README, so that the test
// runs exactly what a reader types.
func readWalkthrough(t testing.TB) walkthrough {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Local walkthrough\n")
	if !ok {
		t.Fatal(`README.md has no "## Local walkthrough" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks [][]string
	for {
		_, rest, ok := strings.Cut(section, "```sh\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatal("unterminated code block in the walkthrough")
		}
		var lines []string
		for _, l := range strings.Split(block, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		blocks = append(blocks, lines)
		section = after
	}
	if len(blocks) != 2 || len(blocks[0]) != 1 || len(blocks[1]) < 2 || !strings.HasPrefix(blocks[1][0], "export ") {
		t.Fatalf("the walkthrough should be two blocks, the emulator command and an export line with the commands: %q", blocks)
	}
	w := walkthrough{server: blocks[0][0], env: map[string]string{}, steps: blocks[1][1:]}
	for _, kv := range strings.Fields(strings.TrimPrefix(blocks[1][0], "export ")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("export %q: want NAME=VALUE", kv)
		}
		w.env[k] = v
	}
	if w.server != "pubsubflow emulator" || w.env["PUBSUB_EMULATOR_HOST"] == "" || w.env["PUBSUB_PROJECT_ID"] == "" {
		t.Fatalf("walkthrough: %+v", w)
	}
	return w
}

// step returns the one walkthrough command that contains all of parts.
func (w walkthrough) step(t testing.TB, parts ...string) string {
	t.Helper()
	var found []string
	for _, s := range w.steps {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(s, p)
		}
		if all {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the walkthrough has %d commands with %q: %q", len(found), parts, w.steps)
	}
	return found[0]
}

// buildCLI builds the pubsubflow command into dir and returns the
// directory, to put first on PATH.
func buildCLI(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", filepath.Join(dir, "pubsubflow"), ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// startCLIEmulator runs the walkthrough's emulator command from bin on a
// free port (the README's default 8085 may be taken) and returns its
// address; it is stopped with SIGTERM, as Ctrl-C would, when the test
// ends, and must exit 0.
func startCLIEmulator(t testing.TB, bin, command string) string {
	t.Helper()
	args := append(strings.Fields(command)[1:], "--addr", "127.0.0.1:0")
	cmd := exec.Command(filepath.Join(bin, "pubsubflow"), args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("emulator exit: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the emulator did not stop within 30s of SIGTERM:\n%s", out.String())
		}
	})
	return waitListening(t, &out, func() bool { return len(exited) > 0 })
}

// runWalkthrough runs the walkthrough's commands, as a shell would, with
// the built CLI first on PATH and the exported variables pointing at addr,
// and checks what each shows.
func runWalkthrough(t *testing.T, w walkthrough, bin, addr string) {
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		if _, ok := w.env[k]; !ok && k != "PATH" && k != "GOOGLE_CLOUD_PROJECT" && k != "CLOUDSDK_CORE_PROJECT" {
			env = append(env, e)
		}
	}
	for k, v := range w.env {
		if k == "PUBSUB_EMULATOR_HOST" {
			v = addr
		}
		env = append(env, k+"="+v)
	}
	outputs := map[string]string{}
	for _, step := range w.steps {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", step)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", step, err, stdout.String(), stderr.String())
		}
		t.Logf("$ %s\n%s%s", step, stdout.String(), stderr.String())
		outputs[step] = stdout.String()
	}
	project := w.env["PUBSUB_PROJECT_ID"]

	// The subscription has its dead-letter policy.
	create := outputs[w.step(t, "subscriptions create", "--dead-letter-topic")]
	if !strings.Contains(create, "dead-letter topic      projects/"+project+"/topics/orders-dead\n") ||
		!strings.Contains(create, "max delivery attempts  5\n") {
		t.Fatalf("subscriptions create printed:\n%s", create)
	}
	list := outputs[w.step(t, "subscriptions list")]
	if !strings.Contains(list, "orders-sub ") || !strings.Contains(list, "dead-letter orders-dead after 5") || !strings.Contains(list, "orders-dead-sub ") {
		t.Fatalf("subscriptions list printed:\n%s", list)
	}
	publish := w.step(t, "| pubsubflow publish")
	id := strings.TrimSpace(outputs[publish])
	data, _, _ := strings.Cut(strings.TrimPrefix(publish, "echo '"), "'")
	if id == "" || strings.Contains(id, "\n") || data == "" {
		t.Fatalf("publish printed %q for %q", id, data)
	}

	// tail --nack shows the one message five times, attempts 1 to 5, and
	// no sixth time: the service dead-letters it instead.
	nacks := parseTail(t, outputs[w.step(t, "tail", "--nack")])
	if len(nacks) != 5 {
		t.Fatalf("tail --nack printed %d messages, want 5", len(nacks))
	}
	for i, l := range nacks {
		if l.ID != id || l.Data == nil || *l.Data != data || l.DeliveryAttempt != i+1 {
			t.Fatalf("delivery %d: %+v; want message %s (%q), delivery_attempt %d", i+1, l, id, data, i+1)
		}
	}

	// Then it is in the dead-letter subscription, with the service's
	// attributes naming where it came from.
	dead := parseTail(t, outputs[w.step(t, "tail", "orders-dead-sub")])
	if len(dead) != 1 {
		t.Fatalf("the dead-letter subscription gave %d messages, want 1", len(dead))
	}
	got := dead[0]
	want := map[string]string{
		"CloudPubSubDeadLetterSourceSubscription":        "orders-sub",
		"CloudPubSubDeadLetterSourceSubscriptionProject": project,
		"CloudPubSubDeadLetterSourceDeliveryCount":       "5",
	}
	for k, v := range want {
		if got.Attributes[k] != v {
			b, _ := json.Marshal(got)
			t.Errorf("dead-lettered message: attribute %s = %q, want %q (%s)", k, got.Attributes[k], v, b)
		}
	}
	// The source's publish time, in RFC 3339 to the millisecond.
	sourceTime, err1 := time.Parse(time.RFC3339Nano, got.Attributes["CloudPubSubDeadLetterSourceTopicPublishTime"])
	published, err2 := time.Parse(time.RFC3339Nano, nacks[0].PublishTime)
	if err1 != nil || err2 != nil || !sourceTime.Equal(published.Truncate(time.Millisecond)) {
		t.Errorf("CloudPubSubDeadLetterSourceTopicPublishTime %q, want the message's publish time %s (%v, %v)",
			got.Attributes["CloudPubSubDeadLetterSourceTopicPublishTime"], nacks[0].PublishTime, err1, err2)
	}
	if got.Data == nil || *got.Data != data {
		t.Errorf("dead-lettered message data %v, want %q", got.Data, data)
	}
}

// The README's walkthrough, command for command, against pubsubflow
// emulator and against Google's emulator: a message nacked five times
// lands in the dead-letter subscription.
func TestWalkthrough(t *testing.T) {
	w := readWalkthrough(t)
	bin := buildCLI(t)
	t.Run("pubsubflow emulator", func(t *testing.T) {
		runWalkthrough(t, w, bin, startCLIEmulator(t, bin, w.server))
	})
	t.Run("Google's emulator", func(t *testing.T) {
		runWalkthrough(t, w, bin, gcemu.Start(t))
	})
}
