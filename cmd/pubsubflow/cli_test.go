package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command answers --help on stdout with exit 0; bad invocations exit
// 2 with the reason on stderr.
func TestUsage(t *testing.T) {
	if code, _, stderr := cli(t, ""); code != exitUsage || !strings.Contains(stderr, "Commands:") {
		t.Fatalf("no arguments: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := cli(t, "", "--help"); code != exitOK || !strings.Contains(stdout, "emulator") {
		t.Fatalf("--help: exit %d, stdout %q", code, stdout)
	}
	if code, _, stderr := cli(t, "", "frobnicate"); code != exitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: exit %d, stderr %q", code, stderr)
	}
	for _, c := range commandsIn(groupRun) {
		for _, help := range [][]string{{c.Name(), "--help"}, {c.Name(), "-h"}, {"help", c.Name()}} {
			code, stdout, stderr := cli(t, "", help...)
			if code != exitOK || !strings.Contains(stdout, "Usage: pubsubflow "+c.Name()) || !strings.Contains(stdout, "Flags:") || stderr != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", help, code, stdout, stderr)
			}
		}
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--no-such-flag"}, "flag provided but not defined"},
		{[]string{"demo", "--messages", "many"}, "invalid value"},
		{[]string{"demo", "--messages", "0"}, "--messages 0"},
		{[]string{"demo", "--ack-deadline", "5s"}, "--ack-deadline 5s: want 10s–600s"},
		{[]string{"demo", "--progress", "fancy"}, `--progress "fancy"`},
		{[]string{"demo", "extra"}, "unexpected arguments"},
		{[]string{"bench", "--plot", "out.jpg"}, "want a .svg or .png file"},
		{[]string{"bench", "--topic", "projects/p/topics/top"}, "--topic needs --subscription"},
		{[]string{"bench", "--subscription", "projects/p/subscriptions/sub", "--compare-naive"}, "needs --topic"},
		{[]string{"bench", "--subscription", "projects/p/nope/sub"}, "want projects/PROJECT/subscriptions/ID"},
		{[]string{"tail"}, "missing SUBSCRIPTION"},
		{[]string{"tail", "a-sub", "b-sub"}, "unexpected arguments"},
		{[]string{"tail", "projects/p/topics/top"}, "want projects/PROJECT/subscriptions/ID"},
		{[]string{"tail", "projects//subscriptions/sub"}, "bad project id"},
		{[]string{"tail", "projects/p/subscriptions/goog-sub"}, "bad id"},
		{[]string{"tail", "projects/my-proj/subscriptions/sub-a", "--max", "-1"}, "--max -1"},
		{[]string{"tail", "projects/my-proj/subscriptions/sub-a", "--insecure"}, "--insecure needs --endpoint"},
		{[]string{"publish"}, "missing TOPIC"},
		{[]string{"publish", "projects/p/topics/top", "--attr", "novalue"}, "want KEY=VALUE"},
		{[]string{"publish", "a/b"}, "want projects/PROJECT/topics/ID or a bare ID"},
		{[]string{"emulator", "--fail", "Nope=1"}, `unknown method "Nope"`},
		{[]string{"emulator", "--fail", "Publish=x"}, "N must be a positive integer"},
		{[]string{"emulator", "--fail", "Publish=1:BOGUS"}, `unknown status code "BOGUS"`},
		{[]string{"emulator", "--kill-code", "OK"}, "not an error"},
		{[]string{"emulator", "--latency", "Pull=soon"}, "bad duration"},
		{[]string{"emulator", "--stall", "Publish=0:2s"}, "K must be a positive integer"},
		{[]string{"emulator", "--stall", "Publish=100"}, "bad duration"},
		{[]string{"emulator", "--min-ack-deadline", "1h"}, "--min-ack-deadline 1h0m0s: want 0–600s"},
		{[]string{"emulator", "--max-backlog-bytes", "-1"}, "--max-backlog-bytes -1: want ≥ 0"},
	}
	for _, b := range bad {
		code, stdout, stderr := cli(t, "", b.args...)
		if code != exitUsage || !strings.Contains(stderr, b.want) || !strings.Contains(stderr, "--help") {
			t.Errorf("%q: exit %d, stderr %q (stdout %q); want exit 2 and %q", b.args, code, stderr, stdout, b.want)
		}
	}
}

// commandsIn are the main commands of a group of the main help, as the
// CLI runs them.
func commandsIn(group string) []*cobra.Command {
	var cs []*cobra.Command
	for _, c := range rootCommand(cliEnv{}).Commands() {
		if c.GroupID == group {
			cs = append(cs, c)
		}
	}
	return cs
}

// A short name takes its project from --project or the environment.
func TestResolveName(t *testing.T) {
	t.Setenv("PUBSUB_PROJECT_ID", "")
	t.Setenv("GOOGLE_CLOUD_PROJECT", "")
	t.Setenv("CLOUDSDK_CORE_PROJECT", "")
	resolveName := func(kind, name, project string) (string, error) {
		return (&endpointFlags{project: project}).resolve(kind, name)
	}
	if _, err := resolveName("topics", "top-a", ""); err == nil || !strings.Contains(err.Error(), "no project is set") {
		t.Fatalf("no project: %v", err)
	}
	if got, err := resolveName("topics", "top-a", "proj-1"); err != nil || got != "projects/proj-1/topics/top-a" {
		t.Fatalf("--project: %q, %v", got, err)
	}
	t.Setenv("GOOGLE_CLOUD_PROJECT", "proj-2")
	if got, err := resolveName("subscriptions", "sub-a", ""); err != nil || got != "projects/proj-2/subscriptions/sub-a" {
		t.Fatalf("environment: %q, %v", got, err)
	}
	if got, err := resolveName("subscriptions", "projects/p/subscriptions/sub-a", "other"); err != nil || got != "projects/p/subscriptions/sub-a" {
		t.Fatalf("full name: %q, %v", got, err)
	}
}

// Flags may follow the positional argument, and "--" ends the flags.
func TestParseInterspersed(t *testing.T) {
	c := tailCommand()
	if err := c.ParseFlags([]string{"--max", "3", "sub-a", "--ack", "--", "--not-a-flag"}); err != nil {
		t.Fatal(err)
	}
	fs := c.Flags()
	if pos := fs.Args(); len(pos) != 2 || pos[0] != "sub-a" || pos[1] != "--not-a-flag" {
		t.Fatalf("positional %q", pos)
	}
	if fs.Lookup("max").Value.String() != "3" || fs.Lookup("ack").Value.String() != "true" {
		t.Fatalf("flags not parsed: max %s, ack %s", fs.Lookup("max").Value, fs.Lookup("ack").Value)
	}
}
