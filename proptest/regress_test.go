package proptest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The minimised cases rapid printed when the invariants' bugs were planted
// (see doc.go) are kept as regression tests. rapid's own fail files cannot
// serve: they hold the draws up to the failure, and a fixed subscriber
// needs more draws than that. So each case is a small script:
//
//	# why
//	config streams=1 limit=1 bytes=-1 buffer=1 deadline=10s heartbeat=1s drain=1s parallelism=1 perResponse=100 payload=0
//	Stall
//	Publish ack 0 0 0
//	Close quiet abrupt
//
// with the machine's actions and their arguments (Publish OUTCOME SIZES…,
// Advance D, FailAcks N, FailModacks N, DelayAcks D, DelayModacks D,
// ExtendFail D, StallStreams BOOL, Rerun P, KillStreams, Stall (the
// handlers and the topology's input), Release), replayed with the same
// checks after every step and the same finish: Close (by default at once,
// as things are, and gracefully; a last line "Close [quiet] [abrupt]" asks
// for the quiet phase first, or a shutdown with a done context), and the
// drain, on a Subscriber and on the hand-built chain.

// TestRegressionScripts replays testdata/regressions/*.txt.
func TestRegressionScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "regressions", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no regression scripts: %v", err)
	}
	for _, f := range files {
		for _, consumer := range []string{"subscriber", "chain"} {
			t.Run(strings.TrimSuffix(filepath.Base(f), ".txt")+"/"+consumer, func(t *testing.T) {
				replay(t, f, consumer)
			})
		}
	}
}

// replay runs one script on consumer.
func replay(t *testing.T, f, consumer string) {
	text, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg, steps, fin, err := parseScript(string(text))
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	cfg.Chain = consumer == "chain"
	// Each replay is one case; a long run replays each several times,
	// since scheduling varies.
	check(t, 1, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := newMachine(rt, cfg, libProcess, libOptions(consumer))
			defer m.teardown()
			m.check(rt)
			for _, s := range steps {
				rt.Logf("step: %s", s.line)
				s.do(rt, m)
				m.check(rt)
			}
			m.finishWith(rt, fin.quiet, fin.abrupt)
		})
	})
}

// ending is how a script's case ends.
type ending struct{ quiet, abrupt bool }

type step struct {
	line string
	do   func(*rapid.T, *machine)
}

func parseScript(text string) (machineConfig, []step, ending, error) {
	var cfg machineConfig
	var steps []step
	var fin ending
	sawConfig := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if f[0] == "config" {
			c, err := parseConfig(f[1:])
			if err != nil {
				return cfg, nil, fin, err
			}
			cfg, sawConfig = c, true
			continue
		}
		if f[0] == "Close" {
			for _, w := range f[1:] {
				switch w {
				case "quiet":
					fin.quiet = true
				case "abrupt":
					fin.abrupt = true
				default:
					return cfg, nil, fin, fmt.Errorf("Close %q: want quiet or abrupt", w)
				}
			}
			continue
		}
		s, err := parseStep(f)
		if err != nil {
			return cfg, nil, fin, err
		}
		s.line = line
		steps = append(steps, s)
	}
	if !sawConfig {
		return cfg, nil, fin, fmt.Errorf("no config line")
	}
	return cfg, steps, fin, nil
}

func parseConfig(fields []string) (machineConfig, error) {
	c := machineConfig{MaxPerResponse: 100, Parallelism: 1}
	for _, kv := range fields {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return c, fmt.Errorf("config %q: want key=value", kv)
		}
		var err error
		switch k {
		case "streams":
			c.Streams, err = strconv.Atoi(v)
		case "limit":
			c.Limit, err = strconv.ParseInt(v, 10, 64)
		case "bytes":
			c.Bytes, err = strconv.ParseInt(v, 10, 64)
		case "buffer":
			// MaxBuffer is gone (the flow budget bounds what is held);
			// older scripts still name it.
		case "deadline":
			c.AckDeadline, err = time.ParseDuration(v)
		case "heartbeat":
			c.Heartbeat, err = time.ParseDuration(v)
		case "drain":
			c.Drain, err = time.ParseDuration(v)
		case "parallelism":
			c.Parallelism, err = strconv.Atoi(v)
		case "perResponse":
			c.MaxPerResponse, err = strconv.Atoi(v)
		case "payload":
			c.MaxPayload, err = strconv.Atoi(v)
		default:
			return c, fmt.Errorf("config: unknown key %q", k)
		}
		if err != nil {
			return c, fmt.Errorf("config %s: %v", kv, err)
		}
	}
	return c, nil
}

func parseStep(f []string) (step, error) {
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "Stall":
		return step{do: func(_ *rapid.T, m *machine) { m.doStall(true); m.doStall(false) }}, nil
	case "Release":
		return step{do: func(t *rapid.T, m *machine) { m.release(t) }}, nil
	case "KillStreams":
		return step{do: func(t *rapid.T, m *machine) { m.killStreams(t) }}, nil
	case "Publish":
		outcome := arg(1)
		var sizes []int
		for _, s := range f[2:] {
			n, err := strconv.Atoi(s)
			if err != nil {
				return step{}, fmt.Errorf("Publish size %q: %v", s, err)
			}
			sizes = append(sizes, n)
		}
		if len(sizes) == 0 {
			return step{}, fmt.Errorf("Publish: no sizes")
		}
		return step{do: func(t *rapid.T, m *machine) { m.doPublish(t, sizes, outcome, "", false) }}, nil
	case "Advance", "DelayAcks", "DelayModacks", "ExtendFail":
		d, err := time.ParseDuration(arg(1))
		if err != nil {
			return step{}, fmt.Errorf("%s: %v", f[0], err)
		}
		switch f[0] {
		case "Advance":
			return step{do: func(_ *rapid.T, m *machine) { m.doAdvance(d) }}, nil
		case "DelayAcks":
			return step{do: func(_ *rapid.T, m *machine) { m.doDelay("Acknowledge", d) }}, nil
		case "ExtendFail":
			return step{do: func(_ *rapid.T, m *machine) { m.doExtendFail(d) }}, nil
		default:
			return step{do: func(_ *rapid.T, m *machine) { m.doDelay("ModifyAckDeadline", d) }}, nil
		}
	case "FailAcks", "FailModacks", "Rerun":
		n, err := strconv.Atoi(arg(1))
		if err != nil {
			return step{}, fmt.Errorf("%s: %v", f[0], err)
		}
		switch f[0] {
		case "FailAcks":
			return step{do: func(_ *rapid.T, m *machine) { m.doFailAcks(n) }}, nil
		case "FailModacks":
			return step{do: func(_ *rapid.T, m *machine) { m.doFailModacks(n) }}, nil
		default:
			return step{do: func(_ *rapid.T, m *machine) { m.doRerun(n) }}, nil
		}
	case "StallStreams":
		b, err := strconv.ParseBool(arg(1))
		if err != nil {
			return step{}, fmt.Errorf("StallStreams: %v", err)
		}
		return step{do: func(_ *rapid.T, m *machine) { m.doStallStreams(b) }}, nil
	}
	return step{}, fmt.Errorf("unknown action %q", f[0])
}

// TestRegressionUnits replays the unit properties' minimised cases.
func TestRegressionUnits(t *testing.T) {
	// Invariant 1: OnReceive moved to emission; one element offered.
	// Invariant 4: the bound off by one; two offered to a bound of 1.
	for _, offer := range []int{1, 2} {
		check(t, 1, func(rt *rapid.T) {
			rapid.SyncTest(rt, func(rt *rapid.T) {
				e := newEagerModelWith(1, false, false, 0)
				defer e.teardown()
				e.check(rt)
				e.doOffer(offer)
				e.check(rt)
				e.finish(rt)
			})
		})
	}
	// Invariant 2: permits counted on push; three small messages offered.
	check(t, 1, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			g := newGateModelWith(6, -1) // -1: flow.Unlimited
			defer g.teardown()
			g.check(rt)
			g.doOffer([]int{1, 1, 1})
			g.check(rt)
			g.finish(rt)
		})
	})
	// Splitting: 2001 acks piled up behind one request in flight.
	check(t, 1, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			runAckerCase(rt, ackerCase{N: 2001, MaxLen: 20, Kinds: 1, MaxInFlight: 1, Latency: 10 * time.Millisecond})
		})
	})
	// Batching: 2500 leases received at once.
	check(t, 1, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			x := newExtenderModelWith(rt, 20*time.Second, 3*time.Minute)
			defer x.teardown()
			x.doPull(rt, 2500)
			x.check(rt)
			x.doAdvance(20 * time.Second)
			x.check(rt)
		})
	})
}
