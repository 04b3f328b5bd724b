package bench

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The memory benchmark re-runs this test binary as its out-of-process
	// server (see memory_test.go).
	if os.Getenv(serverEnv) != "" {
		os.Exit(serveBacklog())
	}
	// So does the throughput benchmark (see feed_test.go).
	if os.Getenv(feedEnv) != "" {
		os.Exit(serveFeed())
	}
	// And the traced publish benchmark's server=child (see publish_test.go).
	if os.Getenv(pubServerEnv) != "" {
		os.Exit(servePublish())
	}
	// Google's client starts OpenCensus's stats worker in a package init,
	// and its stream keep-alive goroutine outlives Receive until the next
	// tick of a 10 s ticker: neither is ours to stop.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
	)
}
