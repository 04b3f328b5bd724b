package gcemu

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// Start runs a fresh emulator for the test and returns its address
// ("127.0.0.1:port"). It is stopped in t.Cleanup, and its log is printed if
// the test failed. Where the emulator is not installed the test is skipped
// with one line, or fails under CI=true.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := Find()
	if err != nil {
		Absent(t, err)
	}
	e, err := Launch(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("Google's Pub/Sub emulator log (%s):\n%s", e.Addr(), e.Log())
		}
	})
	return e.Addr()
}

// Absent ends a test that needs the emulator when it is not installed:
// t.Skip with one line, or t.Fatal when the environment says CI=true, so CI
// cannot pass without running the suite.
func Absent(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v; CI=true requires it (apt-get install google-cloud-cli-pubsub-emulator, or set $%s)", err, EnvBinary)
	}
	t.Skipf("skipping: %v (set $%s or install google-cloud-cli-pubsub-emulator)", err, EnvBinary)
}

// Shared is one emulator for a whole test binary, started from TestMain so
// that each test does not pay the JVM's start-up. Tests get its address with
// Addr, which skips or fails them as Start would when it could not start.
type Shared struct {
	e   *Emulator
	err error // Find's or Launch's error; absent tells which
	// absent is set when the emulator is not installed (skip outside CI)
	// rather than installed and broken (always a failure).
	absent bool
}

// StartShared finds and starts the emulator; it never fails itself, so
// TestMain can run the tests, which then skip or fail one by one with the
// reason. Call Close after m.Run.
func StartShared() *Shared {
	bin, err := Find()
	if err != nil {
		return &Shared{err: err, absent: true}
	}
	e, err := Launch(context.Background(), bin)
	if err != nil {
		return &Shared{err: err}
	}
	return &Shared{e: e}
}

// Addr returns the shared emulator's address. If the test fails, the
// emulator's output written while it ran is printed.
func (s *Shared) Addr(t testing.TB) string {
	t.Helper()
	if s.absent {
		Absent(t, s.err)
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	off := s.e.log.offset()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Google's Pub/Sub emulator log (%s) during this test:\n%s", s.e.Addr(), s.e.log.since(off))
		}
	})
	return s.e.Addr()
}

// Close stops the shared emulator, if it started.
func (s *Shared) Close() error {
	if s.e == nil {
		return nil
	}
	if err := s.e.Stop(); err != nil {
		return fmt.Errorf("stopping the shared emulator: %w", err)
	}
	return nil
}
