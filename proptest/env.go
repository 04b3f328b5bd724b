package proptest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Topology runs one pipeline of the topology under test on env until ctx
// is done, and returns what the pipeline returned. CheckTopology calls it
// once per run: at the start of each case, and again each time the
// machine stops the running pipeline (by cancelling ctx) and starts the
// next one. Everything it starts must have ended when it returns.
//
// Build the pipeline from env.From(ctx) — the case's source, already
// leasing and counting every message on receipt — and end it in
// env.Acknowledge() or any sink that settles what it receives; or hand
// env.Run a handler.
type Topology func(ctx context.Context, env *Env) error

// Env is one case of CheckTopology as a Topology sees it: a pubsubtest
// server in virtual time, a subscription with a consumer on it — a
// Subscriber, or the same chain built by hand (source.Subscribe →
// flow.EagerTrack → flow.FlowGate, fused) — and the machine's faults.
// Its methods are safe for concurrent use.
type Env struct {
	m      *machine
	srv    *pubsubtest.Server
	chain  bool
	sub    *pubsubflow.Subscriber // Subscriber mode
	srcs   []*source.Source       // chain mode: one, or two on two connections
	ext    *flow.Extender
	fcs    []*flow.FlowControl // chain mode: each gate's budget
	gates  []stage.Flow[*pubsubflow.Message, *pubsubflow.Message]
	policy sink.Policy

	// parallelism is what the library's own topologies use for the next
	// run (the machine draws it).
	parallelism int
	ordered     bool

	input   hold // stalls the hand-off to the topology
	handler hold // stalls the library's own handlers

	mu      sync.Mutex
	usesRun bool // a Subscriber's Run closes it when its ctx is done
	sending int  // probes blocked handing a batch to the topology
}

// From starts a pipeline at the case's source, under ctx: a Subscriber's
// Source, or source.Subscribe with flow.EagerTrack and flow.FlowGate fused
// into it. Every message is leased and counted on receipt; the machine
// watches each one as it leaves the source.
func (e *Env) From(ctx context.Context) pipeline.Pipeline[*pubsubflow.Message] {
	if !e.chain {
		return pipeline.FromContext(ctx, e.sub.Source()).Via(&probe{e: e})
	}
	steps := append([]stage.Flow[*pubsubflow.Message, *pubsubflow.Message]{flow.EagerTrack(e.ext, 0)}, e.gates...)
	if len(e.srcs) == 1 {
		return pipeline.FromContext(ctx, e.srcs[0]).Via(steps...).Via(&probe{e: e})
	}
	return pipeline.FromContext(ctx, e.merged(steps))
}

// merged is the sources, each with steps fused into it and a probe of its
// own, as one source: the merge is a stage of the topology's (it holds a
// message until the topology takes it), after the probes.
func (e *Env) merged(steps []stage.Flow[*pubsubflow.Message, *pubsubflow.Message]) stage.Source[*pubsubflow.Message] {
	return stage.SourceFunc[*pubsubflow.Message](func(g *stage.Group) <-chan *pubsubflow.Message {
		ins := make([]<-chan *pubsubflow.Message, len(e.srcs))
		for i, src := range e.srcs {
			var s stage.Source[*pubsubflow.Message] = src
			for _, f := range steps {
				s, _ = s.(stage.Fuser[*pubsubflow.Message]).Fuse(f)
			}
			ins[i] = (&probe{e: e}).Run(g, s.Run(g))
		}
		return merge(g, ins...)
	})
}

// merge forwards what each of ins carries to one channel, closed once
// they all are; it holds one message at a time per input.
func merge(g *stage.Group, ins ...<-chan *pubsubflow.Message) <-chan *pubsubflow.Message {
	out := make(chan *pubsubflow.Message)
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Add(1)
		g.Go(func(ctx context.Context) error {
			defer wg.Done()
			for {
				m, ok := stage.Recv(ctx, in)
				if !ok || !stage.Send(ctx, out, m) {
					return nil
				}
			}
		})
	}
	g.Go(func(context.Context) error { wg.Wait(); close(out); return nil })
	return out
}

// Acknowledge is the sink that settles what reaches it unsettled with an
// ack (sink.Acknowledge with the zero Policy, as a Subscriber's).
func (e *Env) Acknowledge() stage.Sink[*pubsubflow.Message] { return sink.Acknowledge(e.policy) }

// Run processes messages with parallelism workers calling handler until
// ctx is done: nil acks a message, an error nacks it (unless the handler
// settled it). On a Subscriber it is Subscriber.Run, which drains and
// closes the subscriber when ctx is done (the machine then starts no other
// run); on the hand-built chain, From(ctx) through
// operators.ParallelMap into Acknowledge. With Options.Ordered, one
// message per ordering key at a time, in order.
func (e *Env) Run(ctx context.Context, parallelism int, handler pubsubflow.Handler) error {
	if handler == nil {
		return errors.New("proptest: Env.Run: nil handler")
	}
	h := e.watch(handler)
	if e.chain {
		return e.From(ctx).Via(e.process(parallelism, h)).To(e.Acknowledge())
	}
	e.mu.Lock()
	e.usesRun = true
	e.mu.Unlock()
	return e.sub.Run(ctx, parallelism, h)
}

// Server is the case's server: create other topics and subscriptions
// there (a relay's output), and reach it with Server().ClientConn().
func (e *Env) Server() *pubsubtest.Server { return e.srv }

// watch wraps a handler: the machine sees each message as the handler
// gets it, and stalls the handler when it stalls processing.
func (e *Env) watch(h pubsubflow.Handler) pubsubflow.Handler {
	return func(ctx context.Context, m *pubsubflow.Message) error {
		e.m.handOff(m, true)
		if err := e.handler.wait(ctx); err != nil {
			return err
		}
		return h(ctx, m)
	}
}

// process is the chain's processing stage for a handler: what
// Subscriber.Process is on a Subscriber.
func (e *Env) process(parallelism int, h pubsubflow.Handler) stage.Flow[*pubsubflow.Message, *pubsubflow.Message] {
	call := func(ctx context.Context, m *pubsubflow.Message) (*pubsubflow.Message, error) {
		if m.Settled() {
			return m, nil
		}
		sink.Apply(m, h(ctx, m), e.policy)
		return m, nil
	}
	opt := operators.Options[*pubsubflow.Message, *pubsubflow.Message]{
		Emit: func(m *pubsubflow.Message) bool { return !m.Settled() },
	}
	if e.ordered {
		opt.Mode, opt.Key = operators.Keyed, orderingKey
	}
	return operators.ParallelMap(parallelism, call, opt)
}

// orderingKey keys a message by its ordering key; one without gets a key
// of its own.
func orderingKey(m *pubsubflow.Message) string {
	if m.OrderingKey == "" {
		return "\x00" + m.AckID
	}
	return m.OrderingKey
}

// blocked reports whether a probe is blocked handing a batch to the
// topology (the topology does not read its input).
func (e *Env) blocked() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sending > 0
}

func (e *Env) setSending(d int) {
	e.mu.Lock()
	e.sending += d
	e.mu.Unlock()
}

// probe sits between the source and the topology: it records each message
// as the topology gets it, holds the hand-off while the machine stalls the
// input, and knows when the topology does not take its input. It adds one
// hop, and no exposure: a message settled or past its deadline while the
// probe held it is not handed on, as the source would not hand it on.
type probe struct{ e *Env }

var _ stage.BatchFlow[*pubsubflow.Message, *pubsubflow.Message] = (*probe)(nil)

func (p *probe) Run(g *stage.Group, in <-chan *pubsubflow.Message) <-chan *pubsubflow.Message {
	out := make(chan *pubsubflow.Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		for {
			m, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			if b := p.pass(ctx, []*pubsubflow.Message{m}); len(b) == 1 && !handOn(ctx, p.e, out, m) {
				return nil
			}
		}
	})
	return out
}

func (p *probe) RunBatches(g *stage.Group, in <-chan []*pubsubflow.Message) <-chan []*pubsubflow.Message {
	out := make(chan []*pubsubflow.Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		for {
			b, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			if b = p.pass(ctx, b); len(b) > 0 && !handOn(ctx, p.e, out, b) {
				return nil
			}
		}
	})
	return out
}

// pass records b as handed on, waits while the input is stalled, and
// returns what is still to hand on. What a cancelled run holds here, its
// source settles when the run is over.
func (p *probe) pass(ctx context.Context, b []*pubsubflow.Message) []*pubsubflow.Message {
	for _, m := range b {
		p.e.m.handOff(m, false)
	}
	if p.e.input.wait(ctx) != nil {
		return nil
	}
	keep := b[:0]
	now := time.Now()
	for _, m := range b {
		if !message.Of(m).ExpireIfLate(m, now) {
			keep = append(keep, m)
		}
	}
	return keep
}

// handOn sends v to the topology, noting while the send blocks.
func handOn[T any](ctx context.Context, e *Env, out chan<- T, v T) bool {
	e.setSending(1)
	defer e.setSending(-1)
	return stage.Send(ctx, out, v)
}
