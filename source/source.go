package source

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/broadcast"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Source is a StreamingPull source of one subscription: a stage.Source of
// *Message. Subscribe makes one; each Run opens Config.Streams streams.
// It owns what outlives every stream restart: the client id, the settle
// path with its acknowledger, and the messages it still holds. A Step
// written right after it in a pipeline is fused into it (Fuse). Close it
// once its pipelines have ended.
type Source struct {
	*core
	steps []Receipt // the receipt steps' hooks, in order
	flows []Budget  // the steps' budgets
}

// core is what every fused copy of a Source shares.
type core struct {
	client   pubsubpb.SubscriberClient
	cfg      Config // defaults applied
	clientID string
	log      *slog.Logger
	acks     *ack.Acknowledger
	trace    *tracer // nil unless Config.TracerProvider is set
	path     path
	clock    *message.Clock // bound to every message, for its deadline checks
	c        counters
	held     registry
	heldIDs  *heldIDs // the ack ids of what held holds
	later    later
	drain    *drain         // the graceful end Stop begins
	expiries broadcast.Wake // broadcast when a message expires (Expired), for the hand-offs
	runs     atomic.Uint64  // run ids (owners of handed-off messages)

	deadline   atomic.Int32 // stream ack deadline in whole seconds
	deadlineMu sync.Mutex   // guards deadlineCh
	deadlineCh chan struct{}

	props atomic.Pointer[pubsubpb.StreamingPullResponse_SubscriptionProperties]

	hbAnswered atomic.Bool // the server has answered a heartbeat: watchdogs arm

	stopCtx context.Context // done once Stop or Close was called
	stopFn  context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

var (
	_ stage.BatchSource[*Message] = (*Source)(nil)
	_ stage.Fuser[*Message]       = (*Source)(nil)
	_ ack.Tag                     = (*ackTag)(nil)
)

// Subscribe validates cfg and returns a Source that reads the subscription
// through client (typically pubsubpb.NewSubscriberClient on a connection
// from pubsubflow.Dial) when it runs. It opens no stream yet; it starts
// the acknowledger, which Close stops.
func Subscribe(client pubsubpb.SubscriberClient, cfg Config) (*Source, error) {
	if client == nil {
		return nil, errors.New("pubsubflow/source: nil SubscriberClient")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &core{client: client, cfg: cfg, clientID: cfg.ClientID, log: cfg.Logger, deadlineCh: make(chan struct{})}
	if c.clientID == "" {
		// Every stream and reconnect uses it: the server sees one subscriber.
		c.clientID = "pubsubflow-" + rand.Text()
	}
	c.deadline.Store(seconds(cfg.StreamAckDeadline))
	c.stopCtx, c.stopFn = context.WithCancel(context.Background())
	c.path.c = c
	c.clock = message.NewClock()
	c.heldIDs = newHeldIDs()
	c.drain = newDrain()
	acfg := ack.Config{Events: c.emit, Logger: cfg.Logger, Confirmed: c.confirmed}
	if cfg.TracerProvider != nil {
		c.trace = newTracer(cfg.TracerProvider, cfg.Subscription)
		acfg.Tracer = c.trace
	}
	acks, err := ack.New(client, cfg.Subscription, acfg)
	if err != nil {
		c.stopFn()
		return nil, err
	}
	c.acks = acks
	return &Source{core: c}, nil
}

// Fuse returns a copy of s that runs f as one of its receipt steps, if f
// is a Step (Pipeline.Via calls it for the flow right after a source); ok
// is false for any other flow. A step with a Sequence hook fuses too: the
// copy's output runs through it.
func (s *Source) Fuse(f stage.Flow[*Message, *Message]) (stage.Source[*Message], bool) {
	step, ok := f.(Step)
	if !ok {
		return s, false
	}
	n := s.With(step)
	if seq := n.steps[len(n.steps)-1].Sequence; seq != nil {
		return sequenced{src: n, seq: seq}, true
	}
	return n, true
}

// sequenced is a source fused with a step's Sequence: what follows runs
// as stages on the sequenced output (so write the other steps before it).
type sequenced struct {
	src *Source
	seq func(*stage.Group, <-chan *Message) <-chan *Message
}

func (q sequenced) Run(g *stage.Group) <-chan *Message { return q.seq(g, q.src.Run(g)) }

// With returns a copy of s that runs steps, in order, after its own on
// every response it decodes (see Step).
func (s *Source) With(steps ...Step) *Source {
	n := &Source{core: s.core}
	n.steps = append(n.steps, s.steps...)
	n.flows = append(n.flows, s.flows...)
	for _, st := range steps {
		r := st.Receipt(message.Key{})
		n.steps = append(n.steps, r)
		if r.Budget != nil {
			n.flows = append(n.flows, r.Budget)
		}
	}
	return n
}

// ClientID is the client id every stream of this source sends.
func (s *Source) ClientID() string { return s.clientID }

// StreamAckDeadline is the stream ack deadline now in force.
func (s *Source) StreamAckDeadline() time.Duration {
	return time.Duration(s.deadline.Load()) * time.Second
}

// setStreamAckDeadline changes the stream ack deadline (clamped to
// 10–600 s). Open streams announce it at once, new ones start with it.
func (s *Source) setStreamAckDeadline(d time.Duration) {
	sec := seconds(min(max(d, MinStreamAckDeadline), MaxStreamAckDeadline))
	s.deadlineMu.Lock()
	defer s.deadlineMu.Unlock()
	if s.deadline.Swap(sec) != sec {
		close(s.deadlineCh)
		s.deadlineCh = make(chan struct{})
	}
}

// deadlineChanged returns a channel closed at the next deadline change.
func (c *core) deadlineChanged() <-chan struct{} {
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	return c.deadlineCh
}

// Run starts the streams under g and returns the merged output, one
// element per received message (RunBatches without the batches). A
// message that lapses while it waits here is expired, not handed on.
func (s *Source) Run(g *stage.Group) <-chan *Message {
	r := s.newRun()
	in := s.runBatches(g, r)
	out := make(chan *Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		var t *time.Timer
		defer func() {
			if t != nil {
				t.Stop()
			}
		}()
		for {
			b, ok := stage.Recv(ctx, in)
			if !ok {
				return nil
			}
			for i, m := range b {
				if !s.sendOne(ctx, out, m, &t) {
					// Nacked only once the streams have stopped: an open
					// one could be given a nacked message again.
					rest := b[i:]
					for b := range in {
						rest = append(rest, b...)
					}
					r.unsent(rest)
					return nil
				}
			}
		}
	})
	return out
}

// sendOne hands m on unless it lapses or expires first (it is then
// settled Expired); false when ctx is done or the source stops first. An
// extension may move the lapse on (it is read again when the timer fires)
// or bring the deadline forward (an expiry anywhere wakes the wait).
func (s *Source) sendOne(ctx context.Context, out chan<- *Message, m *Message, t **time.Timer) bool {
	for {
		expired := s.expiries.Wait()
		if m.st.ExpireIfLateNow(m) {
			return true
		}
		var lapse <-chan time.Time
		if d := m.st.LapseAt(); !d.IsZero() {
			wait := time.Until(d) - handOffSlack
			if wait <= 0 {
				m.st.Settle(m, message.Expired, 0)
				return true
			}
			if *t == nil {
				*t = time.NewTimer(wait)
			} else {
				(*t).Reset(wait)
			}
			lapse = (*t).C
		}
		select {
		case out <- m:
			return true
		case <-lapse:
		case <-expired:
		case <-ctx.Done():
			return false
		case <-s.stopCtx.Done(): // Stop: hand on nothing more
			return false
		}
	}
}

// RunBatches starts the streams under g and returns the merged output in
// batches (a response's worth, or all that arrived since the last
// hand-off). The channel is closed once every stream has stopped: when g
// is cancelled, or after a terminal failure, which fails g. When the run
// ends, what it received and did not hand on, and what it handed on that
// is still unsettled, is nacked, so the server redelivers it at once.
func (s *Source) RunBatches(g *stage.Group) <-chan []*Message {
	return s.runBatches(g, s.newRun())
}

// Close nacks every message the source received that is still unsettled,
// then flushes and stops the acknowledger (within ctx), and returns once
// every goroutine the source started has exited. A run still going is
// abandoned (see Stop); acks and nacks made after Close fail. A second
// Close returns the first result.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.stopFn()
		s.drain.end()
		s.held.close(func(m *Message) { m.Nack() })
		s.closeErr = s.acks.Close(ctx)
		s.later.close()
		if s.trace != nil {
			s.trace.close()
		}
	})
	return s.closeErr
}

// Stats returns the source's counters (each read atomically, not all at
// one instant).
func (s *Source) Stats() Stats { return s.c.stats(s.acks) }

func (c *core) emit(e event.Event) {
	e.Subscription = c.cfg.Subscription
	c.c.event(e)
	event.Log(c.log, e)
	if c.cfg.events != nil {
		c.cfg.events(e)
	}
}
