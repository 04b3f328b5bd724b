package proptest_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/proptest"
)

// A topology of four workers that keep each ordering key's order, checked
// against the library's invariants and the properties it declares. In
// your own test it is one line:
//
//	proptest.CheckTopology(t, topology, proptest.Options{Ordered: true, MaxLatency: time.Minute})
func ExampleCheckTopology() {
	topology := func(ctx context.Context, env *proptest.Env) error {
		work := operators.ParallelMap(4, func(ctx context.Context, m *pubsubflow.Message) (*pubsubflow.Message, error) {
			return m, nil // your processing; the Acknowledge sink acks what comes out
		}, operators.Options[*pubsubflow.Message, *pubsubflow.Message]{
			Mode: operators.Keyed,
			Key:  func(m *pubsubflow.Message) string { return m.OrderingKey },
		})
		return env.From(ctx).Via(work).To(env.Acknowledge())
	}
	passed := asTest(func(t *testing.T) {
		proptest.CheckTopology(t, topology, proptest.Options{Ordered: true, MaxLatency: time.Minute, Checks: 5})
	})
	fmt.Println("passed:", passed)
	// Output: passed: true
}

// asTest runs f as a test of its own (an Example has no *testing.T) and
// reports whether it passed; what it prints is dropped.
func asTest(f func(t *testing.T)) bool {
	if fl := flag.Lookup("rapid.nofailfile"); fl != nil {
		prev := fl.Value.String()
		_ = fl.Value.Set("true")
		defer func() { _ = fl.Value.Set(prev) }()
	}
	stdout := os.Stdout
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	defer devnull.Close()
	os.Stdout = devnull
	defer func() { os.Stdout = stdout }()
	return testing.RunTests(regexp.MatchString, []testing.InternalTest{{Name: "ExampleCheckTopology", F: f}})
}
