package proptest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// plantedChecks is how many cases the planted mistakes get: each is
// caught in the first few.
const plantedChecks = 20

// TestPlantedMistakes runs CheckTopology on four topologies with a
// mistake a user could make, and shows each caught with a message naming
// the property it breaks; the same topologies without the mistake pass.
func TestPlantedMistakes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		broken    Topology
		fixed     Topology
		opts      func() Options
		want      string
		or        string // another name that is as right (see the branch case)
		alsoFixed bool   // also run the fixed topology (it must pass)
	}{
		{
			name:   "a filter whose dropped messages are never settled",
			broken: filterTopology(leakyFilter),
			fixed: filterTopology(func(keep func(*pubsubflow.Message) bool) stage.Flow[*pubsubflow.Message, *pubsubflow.Message] {
				return pipeline.Filter(keep, func(m *pubsubflow.Message) { m.Nack() })
			}),
			opts: func() Options { return Options{} },
			want: propDropped,
		},
		{
			name:   "a branch that stops reading",
			broken: branchTopology(true),
			fixed:  branchTopology(false),
			opts:   func() Options { return Options{} },
			want:   propStopped,
			// When the stuck branch holds the whole budget, the source has
			// nothing more to hand on and waits for a settle: seen from
			// outside, messages held for ever, which is what propDropped
			// says ("or holds them for ever").
			or: propDropped,
		},
		{
			name:      "a Keyed map replaced by Unordered while ordering is declared",
			broken:    orderTopology(operators.Unordered),
			fixed:     orderTopology(operators.Keyed),
			opts:      func() Options { return Options{Ordered: true} },
			want:      propOrder,
			alsoFixed: true,
		},
		{
			name:      "an ack sent before the side effect",
			broken:    effects.topology(true),
			fixed:     effects.topology(false),
			opts:      func() Options { return Options{SideEffect: effects.recorded} },
			want:      propEffect,
			alsoFixed: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, out := runInner(t.Name(), "3s", func(t *testing.T) {
				opts := tc.opts()
				opts.Checks = plantedChecks
				CheckTopology(t, tc.broken, opts)
			})
			if ok {
				t.Fatalf("the mistake was not caught; output:\n%s", out)
			}
			if !strings.Contains(out, "[rapid] ") || !strings.Contains(out, tc.want) && (tc.or == "" || !strings.Contains(out, tc.or)) {
				t.Fatalf("the failure does not name %q; output:\n%s", tc.want, out)
			}
			t.Logf("caught: %s", firstLines(out, tc.want, 3))
			if os.Getenv("PROPTEST_SHOW") != "" {
				t.Log(out)
			}
			if !tc.alsoFixed {
				return
			}
			if ok, out := runInner(t.Name()+"/fixed", "3s", func(t *testing.T) {
				opts := tc.opts()
				opts.Checks = plantedChecks
				CheckTopology(t, tc.fixed, opts)
			}); !ok {
				t.Fatalf("the topology without the mistake failed:\n%s", out)
			}
		})
	}
}

// firstLines returns n lines of out from the first one containing s.
func firstLines(out, s string, n int) string {
	i := strings.Index(out, s)
	if i < 0 {
		return ""
	}
	lines := strings.SplitN(out[i:], "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// odd keeps messages with an even id: a filter's predicate.
func even(m *pubsubflow.Message) bool {
	n, _ := strconv.Atoi(m.ID)
	return n%2 == 0
}

// filterTopology drops the messages with an odd id with the filter f
// makes, and acks the rest.
func filterTopology(f func(keep func(*pubsubflow.Message) bool) stage.Flow[*pubsubflow.Message, *pubsubflow.Message]) Topology {
	return func(ctx context.Context, env *Env) error {
		return env.From(ctx).Via(f(even)).To(env.Acknowledge())
	}
}

// leakyFilter is a filter written by hand that drops what keep refuses
// without settling it (pipeline.Filter nacks it).
func leakyFilter(keep func(*pubsubflow.Message) bool) stage.Flow[*pubsubflow.Message, *pubsubflow.Message] {
	return stage.FlowFunc[*pubsubflow.Message, *pubsubflow.Message](func(g *stage.Group, in <-chan *pubsubflow.Message) <-chan *pubsubflow.Message {
		out := make(chan *pubsubflow.Message)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for {
				m, ok := stage.Recv(ctx, in)
				if !ok {
					return nil
				}
				if !keep(m) {
					continue // the mistake: neither Ack nor Nack
				}
				if !stage.Send(ctx, out, m) {
					return nil
				}
			}
		})
		return out
	})
}

// branchTopology splits the messages by id into two branches that each
// ack what they get, and merges them. With stop, the odd branch stops
// reading after its first message (a consumer stuck on something that
// never comes), which stops the split, and so everything.
func branchTopology(stop bool) Topology {
	return func(ctx context.Context, env *Env) error {
		branch := func(stops bool) stage.Flow[*pubsubflow.Message, *pubsubflow.Message] {
			return stage.FlowFunc[*pubsubflow.Message, *pubsubflow.Message](func(g *stage.Group, in <-chan *pubsubflow.Message) <-chan *pubsubflow.Message {
				out := make(chan *pubsubflow.Message)
				g.Go(func(ctx context.Context) error {
					defer close(out)
					for n := 0; ; n++ {
						if stops && n == 1 {
							<-ctx.Done() // the mistake: it never reads again
							return nil
						}
						m, ok := stage.Recv(ctx, in)
						if !ok {
							return nil
						}
						m.Ack()
						if !stage.Send(ctx, out, m) {
							return nil
						}
					}
				})
				return out
			})
		}
		return env.From(ctx).Via(split(even, branch(false), branch(stop))).To(env.Acknowledge())
	}
}

// split sends what route accepts through a, the rest through b, and
// merges their outputs.
func split(route func(*pubsubflow.Message) bool, a, b stage.Flow[*pubsubflow.Message, *pubsubflow.Message]) stage.Flow[*pubsubflow.Message, *pubsubflow.Message] {
	return stage.FlowFunc[*pubsubflow.Message, *pubsubflow.Message](func(g *stage.Group, in <-chan *pubsubflow.Message) <-chan *pubsubflow.Message {
		ina, inb := make(chan *pubsubflow.Message), make(chan *pubsubflow.Message)
		g.Go(func(ctx context.Context) error {
			defer close(ina)
			defer close(inb)
			for {
				m, ok := stage.Recv(ctx, in)
				if !ok {
					return nil
				}
				to := inb
				if route(m) {
					to = ina
				}
				if !stage.Send(ctx, to, m) {
					return nil
				}
			}
		})
		outa, outb := a.Run(g, ina), b.Run(g, inb)
		return merge(g, outa, outb)
	})
}

// orderTopology processes messages with four workers in mode (Keyed by
// ordering key, or Unordered), each taking less time than the one
// published before it, then acks them.
func orderTopology(mode operators.Mode) Topology {
	return func(ctx context.Context, env *Env) error {
		work := operators.ParallelMap(4, func(ctx context.Context, m *pubsubflow.Message) (*pubsubflow.Message, error) {
			n, _ := strconv.Atoi(m.ID)
			t := time.NewTimer(time.Duration(1000-n%1000) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			return m, nil
		}, operators.Options[*pubsubflow.Message, *pubsubflow.Message]{Mode: mode, Key: func(m *pubsubflow.Message) string {
			if m.OrderingKey == "" {
				return "\x00" + m.AckID
			}
			return m.OrderingKey
		}})
		return env.From(ctx).Via(work).To(env.Acknowledge())
	}
}

// sideEffects records each message's side effect (a write), for the
// side-effect property.
type sideEffects struct {
	mu   sync.Mutex
	done map[string]bool // message id → written
}

var effects = &sideEffects{done: map[string]bool{}}

// recorded is Options.SideEffect: has m's write happened?
func (s *sideEffects) recorded(m *pubsubflow.Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[m.ID]
}

// topology writes each message, taking a moment, and acks it: after the
// write, or (ackFirst, the mistake) before.
func (s *sideEffects) topology(ackFirst bool) Topology {
	var cur *Env
	return func(ctx context.Context, env *Env) error {
		s.mu.Lock()
		if env != cur { // a new case: a fresh store
			cur, s.done = env, map[string]bool{}
		}
		s.mu.Unlock()
		return env.From(ctx).To(pipeline.ForEach(func(ctx context.Context, m *pubsubflow.Message) error {
			if ackFirst {
				m.Ack()
			}
			t := time.NewTimer(time.Millisecond) // the write takes a moment
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil
			}
			s.mu.Lock()
			s.done[m.ID] = true
			s.mu.Unlock()
			m.Ack()
			return nil
		}))
	}
}
