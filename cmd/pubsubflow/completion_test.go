package main

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The bash completion script loads, and registers itself for pubsubflow;
// every shell's script is printed.
func TestCompletionScripts(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command("bash", "-c", `source <("$0" completion bash) && complete -p pubsubflow`, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "pubsubflow") {
		t.Fatalf("sourcing the bash completion: %v\n%s", err, out)
	}
	for _, shell := range []string{"zsh", "fish", "powershell"} {
		if code, stdout, stderr := cli(t, "", "completion", shell); code != exitOK || !strings.Contains(stdout, "pubsubflow") {
			t.Errorf("completion %s: exit %d, stderr %q", shell, code, stderr)
		}
	}
}

// Topic, subscription and snapshot names complete from a running
// pubsubflow emulator (bare ids, or full names once "projects/" is
// typed); an unreachable server completes nothing, at once, and a silent
// one nothing after completionTimeout.
func TestCompleteNames(t *testing.T) {
	addr, out, stop := startEmulator(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", addr)
	t.Setenv("PUBSUB_PROJECT_ID", "comp-project")
	for _, args := range [][]string{{"topics", "create", "orders"}, {"subscriptions", "create", "orders-sub", "--topic", "orders"},
		{"subscriptions", "create", "audit-sub", "--topic", "orders"}, {"snapshots", "create", "snap-a", "--subscription", "audit-sub"}} {
		if code, _, stderr := cli(t, "", args...); code != exitOK {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"subscriptions", "get", ""}, "audit-sub\norders-sub\n"},
		{[]string{"subscriptions", "get", "o"}, "orders-sub\n"},
		{[]string{"subscriptions", "get", "projects/comp-project/subscriptions/a"}, "projects/comp-project/subscriptions/audit-sub\n"},
		{[]string{"subscriptions", "get", "audit-sub", ""}, ""},
		{[]string{"tail", "--ack", ""}, "audit-sub\norders-sub\n"},
		{[]string{"publish", ""}, "orders\n"},
		{[]string{"subscriptions", "create", "new-sub", "--topic", ""}, "orders\n"},
		{[]string{"subscriptions", "seek", "orders-sub", "--snapshot", ""}, "snap-a\n"},
		{[]string{"snapshots", "delete", ""}, "snap-a\n"},
		{[]string{"topics", "get", "--endpoint", closedAddr(t), "--insecure", ""}, ""},
	} {
		code, stdout, stderr := cli(t, "", append([]string{"__complete"}, c.args...)...)
		if code != exitOK || stdout != c.want+":4\n" {
			t.Errorf("completing %q: exit %d, stdout %q (stderr %q); want %q", c.args, code, stdout, stderr, c.want+":4\n")
		}
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0") // the kernel accepts; nobody answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	code, stdout, _ := cli(t, "", "__complete", "topics", "get", "--endpoint", silent.Addr().String(), "--insecure", "")
	if el := time.Since(start); code != exitOK || stdout != ":4\n" || el > completionTimeout+3*time.Second {
		t.Errorf("completing from a silent server: exit %d, stdout %q after %v", code, stdout, el)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("emulator exit %d:\n%s", code, out.String())
	}
}

// A mistyped command or flag is bad usage that names the nearest ones.
func TestSuggestions(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"topcis"}, "pubsubflow: unknown command \"topcis\"\n\nDid you mean this?\n\ttopics\n"},
		{[]string{"subscriptions", "gte"}, "Did you mean this?\n\tget\n"},
		{[]string{"tail", "sub-a", "--nak"}, "Did you mean this?\n\t--nack\n"},
		{[]string{"publish", "-ordering-key", "k", "top-a"}, "Did you mean this?\n\t--ordering-key\n"},
		{[]string{"completion", "bsh"}, "Did you mean this?\n\tbash\n"},
	} {
		if code, stdout, stderr := cli(t, "", c.args...); code != exitUsage || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
