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
// path of the messages it received (with the acknowledger that sends their
// acks and nacks), and the messages it still holds. Close it once its
// pipelines have ended.
//
// A stage that does its bookkeeping on receipt (a Step: flow.EagerTrack,
// flow.FlowGate) written right after the source in a pipeline is fused
// into it (Fuse): it then runs where each response is decoded, before any
// message waits anywhere.
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
	heldIDs  *heldIDs // the ack ids of what held holds, for refuseMalformed
	later    later
	drain    *drain         // the graceful end Stop begins
	expiries broadcast.Wake // broadcast when a message expires (Expired), for the hand-offs
	runs     atomic.Uint64  // run ids (owners of handed-off messages)

	deadline   atomic.Int32 // stream ack deadline in whole seconds
	deadlineMu sync.Mutex   // guards deadlineCh
	deadlineCh chan struct{}

	props atomic.Pointer[pubsubpb.StreamingPullResponse_SubscriptionProperties]

	hbAnswered atomic.Bool // the server has answered a heartbeat: watchdogs arm (keepalive.go)

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
// through client when it runs. It opens no stream yet; it starts the
// acknowledger, which Close stops. client is typically
// pubsubpb.NewSubscriberClient(conn) for a connection from pubsubflow.Dial or
// a caller's own; tests may pass any implementation.
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
		// Drawn once per Subscribe: every stream and every reconnect uses
		// it, so the server sees one subscriber.
		c.clientID = "pubsubflow-" + rand.Text()
	}
	c.deadline.Store(seconds(cfg.StreamAckDeadline))
	c.stopCtx, c.stopFn = context.WithCancel(context.Background())
	c.path.c = c
	c.clock = message.NewClock()
	c.heldIDs = newHeldIDs()
	c.drain = newDrain()
	s := &Source{core: c}
	acfg := ack.Config{
		Events:    c.emit,
		Logger:    cfg.Logger,
		Confirmed: c.confirmed,
	}
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
	return s, nil
}

// Fuse returns a copy of s that runs f as one of its receipt steps, if f
// is a Step (Pipeline.Via calls it for the flow right after a source). The
// copy shares everything else with s: client id, settle path, held
// messages. ok is false, and s unchanged, for any other flow. A step with
// a Sequence hook fuses too: the copy's output runs through it.
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
// 10–600 s, rounded up to whole seconds). Open streams announce it at
// once in a request that carries nothing else (the API allows
// stream_ack_deadline_seconds on any request); new streams start with it.
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

// properties reports the subscription's properties as the server last sent
// them (false, false before the first response).
func (s *Source) properties() (exactlyOnce, ordered bool) {
	p := s.props.Load()
	return p.GetExactlyOnceDeliveryEnabled(), p.GetMessageOrderingEnabled()
}

// Run starts the streams under g and returns the merged output, one
// element per received message (RunBatches without the batches).
//
// A message waiting here for downstream to take it is re-checked when
// its deadline would lapse, as RunBatches does for a batch: a lapsed copy
// is expired, not handed on.
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
					// Nacked only once the streams have stopped (in
					// closes then), as the pump does: a stream still open
					// could be given a nacked message again, never read.
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
// settled Expired); false when ctx is done or the source stops first. The timer is set for the
// lapse m has when the wait starts; an extension confirmed meanwhile moves
// the lapse on, so when the timer fires the lapse is read again and m is
// expired only if it has come. An extension can also bring the deadline
// forward (a modack shorter than the stream's deadline), and the Extender
// then expires m before the lapse the timer was set for: an expiry
// anywhere wakes the wait, so m is not handed on settled.
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
			// The lapse as read when the timer was set has come; an
			// extension confirmed since may have moved it on: read again.
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
// is cancelled or after a terminal failure, which fails g with an error
// naming the subscription. When the run ends, the messages it received
// and never handed on, and those it handed on that are still unsettled
// (a stage dropped them, or the pipeline stopped), are nacked, so the
// server redelivers them at once.
func (s *Source) RunBatches(g *stage.Group) <-chan []*Message {
	return s.runBatches(g, s.newRun())
}

// Close nacks every message the source received that is still unsettled,
// then flushes and stops the acknowledger (within ctx), and returns once
// every goroutine the source started has exited. Close it after its
// pipelines have ended: a run still going is abandoned, as when the drain
// is over (see Stop). Acks and nacks made after Close fail (an
// exactly-once Result says so). A second Close returns the first result.
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
