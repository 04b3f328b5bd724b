package proptest

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// runInner runs f as a test of its own, the way go test runs a top-level
// test, and returns whether it passed and what it printed. It is how a
// test (or an Example) shows what CheckTopology reports about a topology
// without failing itself. rapid writes no fail file for it and shrinks for
// at most shrink.
func runInner(name, shrink string, f func(t *testing.T)) (ok bool, output string) {
	out, err := os.CreateTemp("", "proptest-inner-*")
	if err != nil {
		panic(err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	restore := setFlags(map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": shrink})
	stdout := os.Stdout
	os.Stdout = out
	// The outer run's -test.run and -test.skip apply to the inner test
	// too: it is named as the outer top-level test, which they let run.
	top, _, _ := strings.Cut(name, "/")
	ok = testing.RunTests(regexp.MatchString, []testing.InternalTest{{Name: top, F: f}})
	os.Stdout = stdout
	restore()
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		panic(err)
	}
	b, err := io.ReadAll(out)
	if err != nil {
		panic(err)
	}
	return ok, string(b)
}

// setFlags sets flags and returns a func that puts back their values.
func setFlags(vals map[string]string) (restore func()) {
	prev := map[string]string{}
	for name, v := range vals {
		f := flag.Lookup(name)
		if f == nil {
			continue
		}
		prev[name] = f.Value.String()
		_ = f.Value.Set(v)
	}
	return func() {
		for name, v := range prev {
			_ = flag.Lookup(name).Value.Set(v)
		}
	}
}
