package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// checkDemoTable checks the demo's final table: every message received
// and acked once, nothing redelivered or expired, on both sides.
func checkDemoTable(t testing.TB, out string, n string) {
	t.Helper()
	if got := tableRow(t, out, "published"); len(got) != 1 || got[0] != n {
		t.Errorf("published %q, want %s", got, n)
	}
	for _, row := range []string{"received", "acked"} {
		if got := tableRow(t, out, row); len(got) != 2 || got[0] != n || got[1] != n {
			t.Errorf("%s %q, want %s and %s", row, got, n, n)
		}
	}
	for _, row := range []string{"redelivered", "expired"} {
		if got := tableRow(t, out, row); len(got) != 2 || got[0] != "0" || got[1] != "0" {
			t.Errorf("%s %q, want 0 and 0", row, got)
		}
	}
	for _, row := range []string{"peak outstanding", "throughput", "wall time"} {
		tableRow(t, out, row)
	}
	if !strings.Contains(out, "0 redeliveries, 0 expirations") {
		t.Errorf("no verdict in:\n%s", out)
	}
}

// The demo exactly as the README runs it (`pubsubflow demo`, no flags),
// as a subprocess over loopback TCP in real time: it reaches the final
// table within 60 s with nothing redelivered or expired, and prints plain
// progress lines since its stdout is not a terminal.
func TestDemoAsReadmeRunsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the 25 s demo in real time")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "demo")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	t.Logf("demo took %v:\n%s", wall.Round(time.Millisecond), stdout.String())
	if err != nil {
		t.Fatalf("demo: %v\nstderr:\n%s", err, stderr.String())
	}
	if wall > 60*time.Second {
		t.Errorf("demo took %v, want under 60 s", wall)
	}
	out := stdout.String()
	checkDemoTable(t, out, "1000")
	if !strings.Contains(out, "demo ") || !strings.Contains(out, "acked 1000/1000") {
		t.Errorf("no progress lines in:\n%s", out)
	}
}

// The demo at its default sizes in virtual time, and a small fast one
// with the progress bar forced on (as on a terminal).
func TestDemoInProcess(t *testing.T) {
	var (
		code           int
		stdout, stderr string
	)
	synctest.Test(t, func(t *testing.T) {
		code, stdout, stderr = cliCtx(context.Background(), "", "demo", "--in-memory")
	})
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	checkDemoTable(t, stdout, "1000")
	// 1000 × 250 ms on 10 workers: 25 s of virtual time.
	if w, err := time.ParseDuration(tableRow(t, stdout, "wall time")[0]); err != nil || w < 25*time.Second || w > 27*time.Second {
		t.Errorf("wall time %v (%v), want ≈ 25 s", w, err)
	}

	code, stdout, stderr = cli(t, "", "demo", "--messages", "300", "--handler-delay", "1ms", "--parallelism", "4", "--progress", "bar")
	if code != exitOK {
		t.Fatalf("small demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	checkDemoTable(t, stdout, "300")
	if !strings.Contains(stdout, "300/300") || !strings.Contains(stdout, "█") {
		t.Errorf("no progress bar in:\n%s", stdout)
	}
}
