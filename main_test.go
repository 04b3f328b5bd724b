package pubsubflow

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Started at init by go.opencensus.io, which Google's client
		// imports (the tracing tests run it).
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		// Google's client leaves its stream keep-alive handler running up
		// to 10 s after Receive returns (until its next monitor tick).
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
	)
}
