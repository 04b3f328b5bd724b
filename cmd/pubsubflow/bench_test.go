package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// tableRow returns the cells of the row of an output table that starts
// with name (cells are separated by two spaces or more).
func tableRow(t testing.TB, out, name string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, name+"  "); ok {
			var cells []string
			for _, c := range strings.Split(rest, "  ") {
				if c = strings.TrimSpace(c); c != "" {
					cells = append(cells, c)
				}
			}
			return cells
		}
	}
	t.Fatalf("no row %q in:\n%s", name, out)
	return nil
}

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// bench --compare-naive at its default sizes, in virtual time (the
// embedded server in memory, inside a synctest bubble): ours redelivers
// nothing and lets nothing expire, the demand-driven shape does both, and
// the plot of both runs is written, as SVG and as PNG.
func TestBenchCompareNaive(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"bench.svg", "bench.png"} {
		plot := filepath.Join(dir, name)
		var (
			code           int
			stdout, stderr string
		)
		synctest.Test(t, func(t *testing.T) {
			code, stdout, stderr = cliCtx(context.Background(), "", "bench", "--compare-naive", "--in-memory", "--plot", plot, "--progress", "none")
		})
		if code != exitOK {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		t.Logf("%s:\n%s", name, stdout)
		red := tableRow(t, stdout, "redelivered")
		exp := tableRow(t, stdout, "expired (server)")
		if len(red) != 2 || len(exp) != 2 {
			t.Fatalf("rows %q, %q", red, exp)
		}
		if atoi(t, red[0]) != 0 || atoi(t, exp[0]) != 0 {
			t.Errorf("ours: redelivered %s, expired %s; want 0 and 0", red[0], exp[0])
		}
		if atoi(t, red[1]) == 0 || atoi(t, exp[1]) == 0 {
			t.Errorf("naive: redelivered %s, expired %s; want both > 0 (else the scenario shows nothing)", red[1], exp[1])
		}
		if ours := tableRow(t, stdout, "acked (server)")[0]; ours != "1000" {
			t.Errorf("ours acked %s of 1000", ours)
		}
		fi, err := os.Stat(plot)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < 10<<10 {
			t.Errorf("%s is %d bytes: too small to hold two panels", name, fi.Size())
		}
	}
}

// bench against a subscription of a running server (here the test's,
// reached as an emulator would be): it publishes each run's messages to
// --topic, consumes them from --subscription, and reports what the client
// can see (the server's counters are n/a).
func TestBenchOnSubscription(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	args := append([]string{"bench", "--subscription", "sub-a", "--topic", "topic-a", "--project", "test-project",
		"--messages", "200", "--handler-delay", "1ms", "--parallelism", "4", "--compare-naive", "--progress", "lines"}, s.endpoint()...)
	code, stdout, stderr := cli(t, "", args...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Log(stdout)
	if got := tableRow(t, stdout, "messages handled"); len(got) != 2 || got[0] != "200" || got[1] != "200" {
		t.Errorf("handled %q, want 200 and 200", got)
	}
	if got := tableRow(t, stdout, "acked (server)"); got[0] != "n/a" {
		t.Errorf("server counters on a real subscription: %q", got)
	}
	if st := s.srv.SubscriptionStats(s.sub); st.Acked != 400 || st.Outstanding != 0 {
		t.Errorf("server: %+v; want 400 acked, none outstanding", st)
	}
	if p := tableRow(t, stdout, "ack latency p50/p90/p99"); len(p) != 2 || p[0] == "n/a" {
		t.Errorf("ack latency %q", p)
	}

	code, _, stderr = cli(t, "", append([]string{"bench", "--subscription", "projects/test-project/subscriptions/no-such-sub"}, s.endpoint()...)...)
	if code != exitFailure || !strings.Contains(stderr, "not found") {
		t.Errorf("missing subscription: exit %d, stderr %q", code, stderr)
	}
}

// bench --trace writes every span as a JSON line: each message's
// subscribe span is a child of the create span our publisher made for it,
// in the same trace, and its process span a child of the subscribe span.
func TestBenchTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.json")
	code, stdout, stderr := cli(t, "", "bench", "--messages", "50", "--handler-delay", "1ms", "--parallelism", "4", "--progress", "none", "--trace", path)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type span struct {
		Name     string `json:"name"`
		TraceID  string `json:"trace_id"`
		SpanID   string `json:"span_id"`
		ParentID string `json:"parent_span_id"`
	}
	byID := map[string]span{}
	var subscribes, processes []span
	for line := range strings.Lines(string(data)) {
		var s span
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		byID[s.SpanID] = s
		switch {
		case strings.HasSuffix(s.Name, " subscribe"):
			subscribes = append(subscribes, s)
		case strings.HasSuffix(s.Name, " process"):
			processes = append(processes, s)
		}
	}
	if len(subscribes) < 50 || len(processes) < 50 {
		t.Fatalf("%d subscribe and %d process spans, want ≥ 50 each", len(subscribes), len(processes))
	}
	for _, s := range subscribes {
		p, ok := byID[s.ParentID]
		if !ok || !strings.HasSuffix(p.Name, " create") || p.TraceID != s.TraceID {
			t.Fatalf("subscribe span %+v is not a child of a create span", s)
		}
	}
	for _, s := range processes {
		if p := byID[s.ParentID]; !strings.HasSuffix(p.Name, " subscribe") {
			t.Fatalf("process span %+v is not a child of a subscribe span", s)
		}
	}
}
