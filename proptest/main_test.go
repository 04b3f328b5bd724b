package proptest

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

// checksEnv raises the case count of every property at once, for long runs.
const checksEnv = "PUBSUBFLOW_RAPID_CHECKS"

// checksOverride is the case count every property uses when the run asked
// for one (-rapid.checks, RAPID_CHECKS or PUBSUBFLOW_RAPID_CHECKS); 0 means
// each property uses its own CI default.
var checksOverride int

func TestMain(m *testing.M) {
	flag.Parse()
	n, err := requestedChecks()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	checksOverride = n
	goleak.VerifyTestMain(m)
}

// requestedChecks returns the case count the run asked for, or 0.
func requestedChecks() (int, error) {
	if v, ok := os.LookupEnv(checksEnv); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("proptest: %s=%q: want a positive integer", checksEnv, v)
		}
		return n, nil
	}
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.checks" {
			explicit = true
		}
	})
	if _, ok := os.LookupEnv("RAPID_CHECKS"); ok {
		explicit = true
	}
	if !explicit {
		return 0, nil
	}
	return strconv.Atoi(flag.Lookup("rapid.checks").Value.String())
}

// check runs prop with rapid: def cases by default (sized for CI), or the
// count the run asked for. Tests in this package do not run in parallel, so
// setting rapid's flag per property is safe.
func check(t *testing.T, def int, prop func(*rapid.T)) {
	t.Helper()
	n := def
	if checksOverride > 0 {
		n = checksOverride
	}
	if err := flag.Set("rapid.checks", strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, prop)
}
