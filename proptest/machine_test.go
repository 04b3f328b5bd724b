package proptest

import (
	"context"
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/stage"
)

// machineChecks is the CI default of each of TestMachine's topologies;
// each case runs about 30 actions (rapid's -rapid.steps) in virtual time.
const machineChecks = 80

// libOptions are the options of the library's own topologies: their
// handlers read each message's outcome attribute.
func libOptions(consumer string) Options { return Options{outcomes: true, consumer: consumer} }

// libHandler does what a message's outcome attribute says.
func libHandler(_ context.Context, m *pubsubflow.Message) error { return settleOutcome(m) }

// libProcess is the library's topology built on the source: a
// Subscriber's Source → Process → Acknowledge, or the hand-built chain
// source.Subscribe → EagerTrack → FlowGate → a ParallelMap of the handler
// → sink.Acknowledge. Each run has the parallelism the machine drew.
func libProcess(ctx context.Context, env *Env) error {
	h := env.watch(libHandler)
	var work stage.Flow[*pubsubflow.Message, *pubsubflow.Message]
	if env.chain {
		work = env.process(env.parallelism, h)
	} else {
		work = env.sub.Process(env.parallelism, h)
	}
	return env.From(ctx).Via(work).To(env.Acknowledge())
}

// libRun is Run with the handler: a Subscriber's Run, or on the chain its
// equivalent.
func libRun(ctx context.Context, env *Env) error { return env.Run(ctx, env.parallelism, libHandler) }

// TestMachine is the end-to-end state machine on the library's own
// topologies: one machine, run on a Subscriber and on the hand-built
// chain, each with the handler in Process and in Run.
func TestMachine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		consumer string
		top      Topology
	}{
		{"Subscriber/Process", "subscriber", libProcess},
		{"chain/Process", "chain", libProcess},
		{"Subscriber/Run", "subscriber", libRun},
		{"chain/Run", "chain", libRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var total tally
			check(t, machineChecks, func(rt *rapid.T) {
				rapid.SyncTest(rt, func(rt *rapid.T) { total.add(runCase(rt, tc.top, libOptions(tc.consumer))) })
			})
			t.Logf("over all cases: %v", &total)
		})
	}
}

// settleOutcome is what the library's own handler (machine_test.go) does
// with a message: what its outcome attribute says.
func settleOutcome(msg *pubsubflow.Message) error {
	switch msg.Attributes[attrOutcome] {
	case outNack:
		if msg.DeliveryAttempt <= 1 {
			return errors.New("proptest: nack the first delivery")
		}
	case outSelfAck:
		msg.Ack()
	}
	return nil
}
