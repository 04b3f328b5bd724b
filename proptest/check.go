package proptest

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow"
)

// DefaultChecks is the number of cases CheckTopology runs when
// Options.Checks is 0: a check of a topology like the examples' takes
// about 10 s with -race on two cores.
const DefaultChecks = 100

// ChecksEnv, when set to a positive integer, is the number of cases every
// CheckTopology runs (and every property of this package's own tests), for
// long runs: PUBSUBFLOW_RAPID_CHECKS=2000 go test ./... . An explicit
// -rapid.checks=N flag (or rapid's RAPID_CHECKS variable) does the same.
const ChecksEnv = "PUBSUBFLOW_RAPID_CHECKS"

// Options declares the properties of the topology under test, beyond the
// library's invariants (which are always checked), and tunes the run.
type Options struct {
	// Ordered declares that the topology keeps the order of each ordering
	// key: no message is acked while a message of its key that the
	// topology received before it is unsettled. The machine then
	// publishes with a few ordering keys (unless Message decides), and
	// the Subscriber is configured with Ordering (Env.Run is keyed). The
	// test server delivers many messages of one key at once, as the
	// service does, so the topology must keep them in order itself.
	Ordered bool
	// SideEffect, if set, is asked when the topology acks a message — on
	// the goroutine that acks it, at that moment — whether the message's
	// side effect (a database write, a publish) has been recorded. It
	// must not block. A false answer fails the check: an ack sent before
	// the side effect loses the message if the process dies between them.
	SideEffect func(m *pubsubflow.Message) bool
	// MaxLatency, if set, bounds the time from a message's publish to its
	// ack, in virtual time, for every message published and acked while no
	// fault or stall is in force (always, for the fresh messages of the
	// quiet phase at the end of a case). Messages the topology nacks are
	// not measured.
	MaxLatency time.Duration
	// Message, if set, makes the n-th message the machine publishes (n
	// from 0): data, attributes, ordering key. Nil: empty attributes and
	// payloads of random sizes (and with Ordered, a few ordering keys).
	Message func(n int) *pubsubpb.PubsubMessage
	// Checks is the number of cases (0: DefaultChecks). ChecksEnv or an
	// explicit -rapid.checks overrides it; -short divides it by 5.
	Checks int

	// outcomes: the library's own handlers (this package's tests) read
	// an outcome attribute on each message.
	outcomes bool
	// consumer forces the consumer: "" draws it per case, else
	// "subscriber" or "chain".
	consumer string
}

// CheckTopology runs the state machine against topology: rapid draws
// Options.Checks cases, each a consumer (a Subscriber, or the same chain
// built by hand from source.Subscribe, flow.EagerTrack and flow.FlowGate)
// with random limits, and a random sequence of actions — publishes, stalls
// of the topology's input, failing and slow acks and modacks (with an ErrorInfo too), lease
// extensions failing for a while, streams killed and stalled, time passing,
// the topology's pipeline stopped and started again — then usually a
// quiet phase, and Close. Everything runs over a pubsubtest server on
// bufconn inside a testing/synctest bubble: time is virtual, and a case
// takes milliseconds of real time.
//
// After every action it checks the library's invariants against a model
// of the wire — every message settled exactly once, none lost, the flow
// budget exact with no tolerance, leases covering everything held, no
// copy the server released handed on or counted as acked, Close prompt
// with no goroutine left — and the properties declared in opts. In the
// quiet phase every message handed to the topology must be settled and
// fresh messages must get through: a topology that drops messages without
// settling them, or stops reading its input, fails there.
//
// A failure names the property broken; rapid then shrinks the case and
// prints the minimal one, with its actions and the ids of the messages
// involved. CheckTopology sets rapid's -rapid.checks flag for its run, so
// do not run it in parallel with other rapid checks (t.Parallel).
func CheckTopology(t *testing.T, topology Topology, opts Options) {
	t.Helper()
	if topology == nil {
		t.Fatal("proptest: CheckTopology: nil topology")
	}
	var total tally
	checkRapid(t, caseCount(opts.Checks), func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := runCase(rt, topology, opts)
			total.add(m)
		})
	})
	t.Logf("over all cases: %v", &total)
}

// runCase runs one case to its end.
func runCase(rt *rapid.T, top Topology, opts Options) *machine {
	chain := opts.consumer == "chain"
	if opts.consumer == "" {
		chain = rapid.Bool().Draw(rt, "chain")
	}
	m := newMachine(rt, drawMachineConfig(rt, chain, opts.Ordered), top, opts)
	defer m.teardown()
	rt.Repeat(m.actions())
	m.finish(rt)
	return m
}

var (
	checksOnce     sync.Once
	checksOverride int // > 0: the run asked for this many cases
	checksErr      error
	rapidFlags     sync.Mutex
)

// caseCount is the number of cases to run: def (or DefaultChecks), unless
// the run asked for a number.
func caseCount(def int) int {
	checksOnce.Do(func() { checksOverride, checksErr = requestedChecks() })
	switch {
	case checksOverride > 0:
		return checksOverride
	case def > 0:
		return def
	}
	return DefaultChecks
}

// requestedChecks returns the case count the run asked for, or 0: the
// ChecksEnv variable, an explicit -rapid.checks, or RAPID_CHECKS.
func requestedChecks() (int, error) {
	if v, ok := os.LookupEnv(ChecksEnv); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("proptest: %s=%q: want a positive integer", ChecksEnv, v)
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
	f := flag.Lookup("rapid.checks")
	if !explicit || f == nil {
		return 0, nil
	}
	return strconv.Atoi(f.Value.String())
}

// checkRapid runs prop with rapid for n cases: rapid reads its case count
// from its flag, which is set for the call and put back after.
func checkRapid(t *testing.T, n int, prop func(*rapid.T)) {
	t.Helper()
	caseCount(0)
	if checksErr != nil {
		t.Fatal(checksErr)
	}
	rapidFlags.Lock()
	defer rapidFlags.Unlock()
	f := flag.Lookup("rapid.checks")
	if f == nil {
		t.Fatal("proptest: rapid's -rapid.checks flag is not registered")
	}
	prev := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Value.Set(prev) }()
	firstFailure.Store(nil)
	defer func() {
		if d := firstFailure.Load(); t.Failed() && d != nil {
			t.Logf("details of the first failure: %s", *d)
		}
	}()
	rapid.Check(t, prop)
}

// fail ends the case with a stable message, what (rapid shrinks a case
// only while it fails with the same message), after logging the details
// (ids, times, counts change from run to run) and the actions so far.
func (m *machine) fail(what, format string, args ...any) {
	m.t.Helper()
	detail := fmt.Sprintf(format, args...)
	full := fmt.Sprintf("%s\n%s\ncase: %v\nactions:\n  %s", what, detail, m.cfg, strings.Join(m.steps, "\n  "))
	firstFailure.CompareAndSwap(nil, &full)
	m.t.Logf("%s", full)
	m.t.Fatal(what)
}

// firstFailure keeps the details of the first failure of a check: when
// rapid cannot reproduce a case step for step it prints only the message,
// and the details are what explains it.
var firstFailure atomic.Pointer[string]

// tally sums what the cases did, to show in -v output that the machine
// reaches the states it is meant to test.
type tally struct {
	Cases, Published, Deliveries, Redeliveries, Expired int
	Kills, Reruns, Stalls, ExtendFails, Streams         int
	Chain                                               int
	InfoRetryable, InfoPermanent                        int // FailInfo injections
	Refused                                             int // deliveries whose ack or extension was refused
	VirtualTime                                         time.Duration
}

func (t *tally) add(m *machine) {
	ss := m.srv.SubscriptionStats(m.subName)
	t.Cases++
	t.Published += m.published
	t.Deliveries += int(ss.Delivered)
	t.Redeliveries += int(ss.Redelivered)
	t.Expired += int(ss.Expired)
	t.Kills += m.tally.Kills
	t.Reruns += m.tally.Reruns
	t.Stalls += m.tally.Stalls
	t.ExtendFails += m.tally.ExtendFails
	t.InfoRetryable += m.tally.InfoRetryable
	t.InfoPermanent += m.tally.InfoPermanent
	t.Refused += m.led.refusedCount()
	t.Streams += int(ss.Streams)
	if m.cfg.Chain {
		t.Chain++
	}
	t.VirtualTime += time.Since(m.start)
}

func (t *tally) String() string {
	return fmt.Sprintf("%d cases (%d on the hand-built chain), %d published, %d deliveries (%d redeliveries, %d expired at the server), %d streams killed, %d reruns, %d stalls, %d extension failures, %d+%d ErrorInfo faults (retryable+permanent; %d deliveries refused), %d streams, %v of virtual time",
		t.Cases, t.Chain, t.Published, t.Deliveries, t.Redeliveries, t.Expired, t.Kills, t.Reruns, t.Stalls, t.ExtendFails, t.InfoRetryable, t.InfoPermanent, t.Refused, t.Streams, t.VirtualTime.Round(time.Second))
}
