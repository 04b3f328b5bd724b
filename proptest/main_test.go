package proptest

import (
	"testing"

	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// check runs prop with rapid: def cases by default (sized for CI), or the
// count the run asked for (ChecksEnv, -rapid.checks, RAPID_CHECKS).
// Tests in this package do not run in parallel.
func check(t *testing.T, def int, prop func(*rapid.T)) {
	t.Helper()
	checkRapid(t, caseCount(def), prop)
}
