package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// TestFlagsRefuseWhatTheServiceRefuses: names and message fields the
// service would refuse are usage errors (exit 2) at once, before any
// connection or run; each case under a deadline.
func TestFlagsRefuseWhatTheServiceRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"tail", "projects/p/subscriptions/has space"}, "bad id"},
		{[]string{"tail", "projects/p/subscriptions/a" + strings.Repeat("b", 299)}, "bad id"},
		{[]string{"tail", "projects/p/subscriptions/ab"}, "bad id"},
		{[]string{"tail", "projects/Bad_Project/subscriptions/orders"}, "bad project id"},
		{[]string{"tail", "projects/p/subscriptions/orders", "--reconnect-timeout", "-1s"}, "--reconnect-timeout"},
		{[]string{"publish", "projects/p/topics/GOOG-topic"}, "bad id"},
		{[]string{"publish", "projects/p/topics/top", "--attr", "googkey=v"}, `--attr ["googkey"]: reserved attribute key`},
		{[]string{"publish", "projects/p/topics/top", "--attr", strings.Repeat("k", 300) + "=v"}, "attribute key size"},
		{[]string{"publish", "projects/p/topics/top", "--attr", "k=" + strings.Repeat("v", 2000)}, "attribute value size"},
		{[]string{"publish", "projects/p/topics/top", "--ordering-key", strings.Repeat("o", 2000)}, "--ordering-key: ordering key size"},
		{[]string{"bench", "--plot", filepath.Join(dir, "missing", "x.svg")}, "does not exist"},
		{[]string{"bench", "--plot", filepath.Join(dir, "file.txt", "x.svg")}, "does not exist"},
		{[]string{"bench", "--plot", dir + ".svg/"}, "want a .svg or .png file"},
	}
	if err := os.WriteFile(filepath.Join(dir, "file.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		code, stdout, stderr := cliCtx(ctx, "", b.args...)
		cancel()
		if code != exitUsage || !strings.Contains(stderr, b.want) {
			t.Errorf("%.80q: exit %d, stderr %.300q (stdout %.100q); want exit 2 and %q", b.args, code, stderr, stdout, b.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%.80q: took %v; a usage error must come before any run", b.args, d)
		}
	}
}

// TestVersion: --version prints the module version and exits 0.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version", "-version"} {
		code, stdout, _ := cli(t, "", arg)
		if code != exitOK || !strings.HasPrefix(stdout, "pubsubflow ") || !strings.Contains(stdout, "go1.") {
			t.Errorf("%s: exit %d, stdout %q", arg, code, stdout)
		}
	}
}

// TestHelpListsLimits: the main --help and publish --help list the
// service's limits; tail --help the reconnect timeout.
func TestHelpListsLimits(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"publish", "--help"}} {
		code, stdout, _ := cli(t, "", args...)
		for _, want := range []string{"≤ 100", "1–256 bytes", "≤ 1,024 bytes", "10,000,000", "3–255"} {
			if code != exitOK || !strings.Contains(stdout, want) {
				t.Errorf("%q: exit %d, help lacks %q", args, code, want)
			}
		}
	}
	if code, stdout, _ := cli(t, "", "tail", "--help"); code != exitOK || !strings.Contains(stdout, "-reconnect-timeout") {
		t.Errorf("tail --help lacks --reconnect-timeout")
	}
}

// TestPublishLongLines: a line far over bufio's 64 KiB default is one
// message; a line over the service's 10 MB limit is a clear error after
// the lines before it were published.
func TestPublishLongLines(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	long := strings.Repeat("x", 1<<20)
	code, stdout, stderr := cli(t, "short\n"+long+"\n", append([]string{"publish", s.topic}, s.endpoint()...)...)
	if code != exitOK || len(strings.Fields(stdout)) != 2 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	got := s.pullAll(t)
	if len(got) != 2 || len(got[1].Data) != len(long) {
		t.Fatalf("%d messages on the server, want 2 with the 1 MiB line intact", len(got))
	}
	tooLong := strings.Repeat("y", maxLineBytes(nil, "")+1)
	code, stdout, stderr = cli(t, "before\n"+tooLong+"\nafter\n", append([]string{"publish", s.topic}, s.endpoint()...)...)
	if code != exitFailure || !strings.Contains(stderr, "line 2 is longer than 9,999,615 bytes") || len(strings.Fields(stdout)) != 1 {
		t.Fatalf("exit %d, stdout %q, stderr %.200q; want exit 1 naming line 2 and the limit, and line 1 published", code, stdout, stderr)
	}
	if strings.Contains(stderr, "token too long") {
		t.Fatalf("stderr %q leaks bufio's wording", stderr)
	}
}

// TestInterruptExitCodes: Ctrl-C (the command's context cancelled) stops
// demo with exit 130 and "interrupted", not "context canceled"; tail,
// which runs until stopped, exits 0. Each is interrupted once it is at
// work: demo has printed a progress line, tail has its stream open.
func TestInterruptExitCodes(t *testing.T) {
	interrupt := func(working func(stdout string) bool, args ...string) (int, string) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		var out, errb syncBuffer
		var code int
		go func() {
			defer close(done)
			code = run(ctx, args, strings.NewReader(""), &out, &errb)
		}()
		waitFor(t, fmt.Sprintf("%q at work", args), func() bool {
			select {
			case <-done:
				t.Fatalf("%q ended before the interrupt: exit %d, stderr %q", args, code, errb.String())
			default:
			}
			return working(out.String())
		})
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%q did not stop within 30 s of the interrupt", args)
		}
		return code, errb.String()
	}
	code, stderr := interrupt(func(stdout string) bool { return strings.Contains(stdout, "\ndemo ") },
		"demo", "--progress", "lines")
	if code != exitInterrupted || !strings.Contains(stderr, "interrupted") || strings.Contains(stderr, "context canceled") {
		t.Errorf("demo: exit %d, stderr %q; want 130 and \"interrupted\"", code, stderr)
	}
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	streaming := func(string) bool {
		for _, st := range s.srv.Streams(s.sub) {
			if st.Open {
				return true
			}
		}
		return false
	}
	code, stderr = interrupt(streaming, append([]string{"tail", s.sub}, s.endpoint()...)...)
	if code != exitOK {
		t.Errorf("tail: exit %d, stderr %q; want 0", code, stderr)
	}
}
