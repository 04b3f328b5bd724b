package suite

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/pubsubflow/pubsubflow/internal/gcemu"
)

// emu is the emulator every test of the package shares: a JVM start costs
// seconds, and each test makes topics and subscriptions of its own names.
var emu *gcemu.Shared

func TestMain(m *testing.M) {
	// The scale-out test re-runs this binary as its subscriber processes.
	if os.Getenv(roleEnv) == roleSubscriber {
		os.Exit(subscriberMain())
	}
	emu = gcemu.StartShared()
	code := m.Run()
	if err := emu.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	// Google's client starts OpenCensus's stats worker in a package init,
	// and its stream keep-alive goroutine outlives Receive until the next
	// tick of a 10 s ticker: neither is ours to stop.
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
			goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
