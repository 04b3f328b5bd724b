package flow_test

import (
	"context"
	"fmt"
	"runtime"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// A budget of 4 shared by tenants: a flood of "big" messages queued first
// does not keep "small" out. While both wait, each holds at most half the
// budget, and they are admitted in turn, so small's four are all handed on
// before big's last ones.
func ExampleKeyedFlowGate() {
	fc := flow.NewFlowControl(4, flow.Unlimited)
	in := make(chan *source.Message, 12)
	for i := range 8 {
		in <- &source.Message{ID: fmt.Sprint("big-", i), Attributes: map[string]string{"tenant": "big"}}
	}
	for i := range 4 {
		in <- &source.Message{ID: fmt.Sprint("small-", i), Attributes: map[string]string{"tenant": "small"}}
	}
	close(in)
	g := stage.NewGroup(context.Background())
	gate := flow.KeyedFlowGate(fc, flow.ByAttribute("tenant"))
	out := gate.Run(g, in)
	handed := map[string]int{}
	smallDone := 0
	for m := range out {
		// Hold the first permit until the gate has read all twelve (a
		// consumer faster than the gate's reads could otherwise see big's
		// eight before small's first arrived: nothing waits to be fair to).
		for len(in) > 0 {
			runtime.Gosched()
		}
		handed[m.Attributes["tenant"]]++
		if handed["small"] == 4 && smallDone == 0 {
			smallDone = handed["big"] + 4
		}
		m.Ack() // settling gives the permit back
	}
	_ = g.Wait()
	fmt.Println(handed, "- small all served among the first 10:", smallDone <= 10)
	// Output: map[big:8 small:4] - small all served among the first 10: true
}
