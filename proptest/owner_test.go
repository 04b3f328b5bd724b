package proptest

import "testing"

// TestFrameOwner: the root package's composable stages (Streams, Filter)
// are the topology's, so their goroutines, which end with the topology's
// run after Close, are not taken for the library's left behind by Close;
// the Subscriber's own code stays the library's.
func TestFrameOwner(t *testing.T) {
	for fn, want := range map[string]string{
		module + ".Filter.Filter[...].func3.1()":              ownerTopology, // pipeline.Filter's goroutine, inlined into pubsubflow.Filter
		module + ".Filter.func1(0xc000123)":                   ownerTopology, // its dropped func
		module + ".Streams[...].func1()":                      ownerTopology,
		module + ".(*Subscriber).Close(0xc0000a2000)":         ownerLibrary,
		module + "/source.(*stream).recv(0xc0001)":            ownerLibrary,
		module + "/pipeline.Filter[...].func1.1()":            ownerTopology,
		module + "/stage.(*Group).Go.func1()":                 "",
		"main.(*topology).run(0xc0001, {0x0, 0x0})":           ownerTopology,
		"github.com/reugn/go-streams/flow.Split[...].func1()": ownerTopology,
		"runtime.gopark(0x1)":                                 "",
	} {
		if got := frameOwner(fn); got != want {
			t.Errorf("frameOwner(%q) = %q, want %q", fn, got, want)
		}
	}
}
