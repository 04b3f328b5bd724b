package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/connect"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// ErrClosed is returned by Run and Source on a subscriber that was closed.
var ErrClosed = errors.New("pubsubflow: subscriber closed")

// Subscriber consumes one subscription. It owns the lease table, the flow
// budget and the acknowledger, which outlive every stream restart, and
// composes the stages around them so they cannot be wired wrong:
//
//	Subscribe (receipt steps on decode: bind, EagerTrack, FlowGate)
//	    ══batches══▶ [your stages] ─▶ Acknowledge
//
// Source and Acknowledge are the two ends for custom topologies; Run is the
// whole thing with a handler. Close (or Shutdown) drains and stops it.
type Subscriber struct {
	cfg    SubscriberConfig
	sub    string
	conn   *grpc.ClientConn // dialed by us, closed by Close
	client pubsubpb.SubscriberClient

	src      *source.Source
	srcReady atomic.Pointer[source.Source] // for events that may precede src
	fc       *flow.FlowControl
	gate     *flow.Gate    // FlowGate's receipt step and the streams' budget
	tracker  *flow.Tracker // EagerTrack's receipt step
	ext      *flow.Extender
	acks     *ack.Acknowledger
	settler  *sink.Settler
	policy   sink.Policy
	tel      *telemetry
	tracing  *subTracer // nil unless TracerProvider is set
	c        counters
	ordered  bool
	detected bool // the subscription orders by key (NewSubscriber asked)

	life      context.Context // cancelled when the streams must stop
	stop      context.CancelFunc
	draining  atomic.Bool
	settledCh chan struct{} // pinged on settle while draining
	runs      sync.WaitGroup
	active    atomic.Int64  // running Source pipelines
	handling  atomic.Int64  // Run pipelines not yet ended (their workers settle what they queued)
	nextRun   atomic.Uint64 // hand-off owner ids (from 2; 1 is MarkHandedOff's)
	runsDone  chan struct{}
	abandon   context.Context // done when the drain timeout has passed
	giveUp    context.CancelFunc

	mu         sync.Mutex
	runCancels map[*context.CancelFunc]struct{}
	closing    atomic.Bool
	closeErr   error         // written before closeDone is closed
	closeDone  chan struct{} // closed when shutdown has finished
	closed     chan struct{} // closed when shutdown starts
}

// NewSubscriber validates cfg, connects, and prepares a subscriber for
// subscription (projects/P/subscriptions/S). Nothing is received until Run
// or a pipeline from Source runs. Unless cfg.Ordering is set it asks the
// server whether the subscription orders by key, within ctx: if that fails
// (a cancelled context, an unreachable or unknown subscription) so does
// NewSubscriber, rather than process ordered messages out of order; only
// a missing permission (PERMISSION_DENIED) or a server without the method
// (UNIMPLEMENTED) falls back to cfg.Ordering, with a warning in the log.
// A failed NewSubscriber leaves nothing running.
func NewSubscriber(ctx context.Context, subscription string, cfg SubscriberConfig) (*Subscriber, error) {
	if ctx == nil {
		return nil, errors.New("pubsubflow: NewSubscriber: nil context")
	}
	if err := ValidateSubscription(subscription); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Subscriber{
		cfg: cfg, sub: subscription,
		settledCh:  make(chan struct{}, 1),
		runsDone:   make(chan struct{}, 1),
		runCancels: map[*context.CancelFunc]struct{}{},
		closed:     make(chan struct{}),
		closeDone:  make(chan struct{}),
	}
	s.abandon, s.giveUp = context.WithCancel(context.Background())
	s.nextRun.Store(1)
	if err := s.connect(ctx); err != nil {
		s.giveUp()
		return nil, err
	}
	// Before build starts any goroutine, so a failure leaves none.
	if !cfg.Ordering {
		ordered, err := s.detectOrdering(ctx)
		if err != nil {
			s.closeParts()
			return nil, err
		}
		s.detected = ordered
	}
	if err := s.build(ctx); err != nil {
		s.closeParts()
		return nil, err
	}
	return s, nil
}

func (s *Subscriber) connect(ctx context.Context) error {
	switch {
	case s.cfg.Client != nil:
		s.client = s.cfg.Client
	case s.cfg.Conn != nil:
		s.client = pubsubpb.NewSubscriberClient(s.cfg.Conn)
	default:
		conn, err := connect.Dial(ctx, s.cfg.Connect)
		if err != nil {
			return fmt.Errorf("pubsubflow: connecting for %s: %w", s.sub, err)
		}
		s.conn, s.client = conn, pubsubpb.NewSubscriberClient(conn)
	}
	return nil
}

// build makes the long-lived parts: telemetry, flow control, lease
// extender, acknowledger, settle path and the stream source.
func (s *Subscriber) build(ctx context.Context) error {
	var err error
	s.tel, err = newTelemetry(s.sub, s.cfg.Logger, s.cfg.MeterProvider, &s.c, s.Stats)
	if err != nil {
		return fmt.Errorf("pubsubflow: telemetry: %w", err)
	}
	var acksTracer ack.Tracer
	var leaseTracer flow.Tracer
	if s.cfg.TracerProvider != nil {
		s.tracing = newSubTracer(s.cfg.TracerProvider, s.sub)
		acksTracer, leaseTracer = s.tracing, s.tracing
	}
	s.fc = flow.NewFlowControl(clientLimit(s.cfg.MaxOutstandingMessages), clientLimit(s.cfg.MaxOutstandingBytes))
	maxExt := s.cfg.MaxExtension
	if maxExt == Unlimited {
		maxExt = -1
	}
	s.ext, err = flow.NewExtender(s.client, s.sub, flow.ExtenderConfig{
		Strategy:          s.cfg.Lease,
		StreamAckDeadline: s.cfg.StreamAckDeadline,
		MaxExtension:      maxExt,
		Events:            s.onLeaseEvent,
		Tracer:            leaseTracer,
		Logger:            s.cfg.Logger,
	})
	if err != nil {
		return err
	}
	s.acks, err = ack.New(s.client, s.sub, ack.Config{
		FlushInterval: s.cfg.AckFlushInterval,
		Flow:          s.fc,
		OnAcked:       s.acked,
		Tracer:        acksTracer,
		Events:        s.tel.onEvent,
		Logger:        s.cfg.Logger,
	})
	if err != nil {
		return err
	}
	s.tracker = &flow.Tracker{Extender: s.ext}
	s.gate = &flow.Gate{Flow: s.fc, Pending: func() int64 { return s.acks.Stats().Unacked }}
	s.settler = sink.NewSettler(s.acks, s.fc, s.ext)
	s.settler.ReleaseAfterAck = true
	s.policy = sink.Policy{OnSuccess: s.cfg.OnSuccess, OnFailure: s.cfg.OnFailure, NackDelay: s.cfg.NackDelay}
	s.src, err = source.Subscribe(s.client, source.Config{
		Subscription:           s.sub,
		StreamAckDeadline:      s.cfg.StreamAckDeadline,
		ClientID:               s.cfg.ClientID,
		MaxOutstandingMessages: s.cfg.MaxOutstandingMessages,
		MaxOutstandingBytes:    s.cfg.MaxOutstandingBytes,
		Streams:                s.cfg.Streams,
		HeartbeatInterval:      s.cfg.HeartbeatInterval,
		HeartbeatTimeout:       s.cfg.HeartbeatTimeout,
		Backoff:                s.cfg.Backoff,
		Classify:               s.cfg.Reconnect,
		ReconnectTimeout:       reconnectTimeout(s.cfg.ReconnectTimeout),
		Receipt:                s.receipt,
		Budget:                 s.gate,
		Ready:                  s.tracker.Ready,
		HandOff:                s.handOff,
		Unsent:                 s.unsent,
		Events:                 s.tel.onEvent,
		Logger:                 s.cfg.Logger,
	})
	if err != nil {
		return err
	}
	s.srcReady.Store(s.src)
	s.life, s.stop = context.WithCancel(context.Background())
	s.ordered = s.cfg.Ordering || s.subscriptionOrdered(ctx)
	return nil
}

// clientLimit maps the config's Unlimited to flow control's "no limit".
func clientLimit(v int64) int64 {
	if v == Unlimited {
		return 0
	}
	return v
}

// subscriptionOrdered reports whether the subscription orders by key, as
// NewSubscriber found out before the parts were built.
func (s *Subscriber) subscriptionOrdered(context.Context) bool { return s.detected }

// detectOrdering asks the server whether the subscription orders by key.
// Only PERMISSION_DENIED and UNIMPLEMENTED are not errors: without the
// permission (or the method) the answer cannot be had, and cfg.Ordering
// decides.
func (s *Subscriber) detectOrdering(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := s.client.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.sub})
	switch status.Code(err) {
	case codes.OK:
		return got.GetEnableMessageOrdering(), nil
	case codes.PermissionDenied, codes.Unimplemented:
		if s.cfg.Logger != nil {
			s.cfg.Logger.Warn("pubsubflow: cannot tell whether the subscription orders by key; set SubscriberConfig.Ordering if it does",
				"subscription", s.sub, "err", err)
		}
		return false, nil
	}
	return false, fmt.Errorf("pubsubflow: asking whether %s orders by key (set SubscriberConfig.Ordering to skip): %w", s.sub, err)
}

// ClientID is the id sent on every stream of this subscriber.
func (s *Subscriber) ClientID() string { return s.src.ClientID() }

// settlePath is the Subscriber seen as its messages' one settle path
// (message.Settler); a distinct type keeps Settle out of the Subscriber's
// API, where a user calling it would bypass the message's first-outcome
// rule.
type settlePath Subscriber

// Settle counts the outcome and hands the message to the sink's settler,
// which releases the flow permit and the lease and sends the ack or nack.
func (p *settlePath) Settle(m *Message, o Outcome, d time.Duration) {
	s := (*Subscriber)(p)
	if s.tracing != nil {
		s.tracing.settled(m, o)
	}
	s.settler.Settle(m, o, d)
	switch o {
	case message.Ack:
		s.c.acked.Add(1)
		s.tel.ackLatency(time.Since(m.ReceiveTime))
	case message.Nack, message.NackAfter:
		s.c.nacked.Add(1)
	case message.NoOp:
		s.c.noops.Add(1)
	case message.Expired:
		s.c.expired.Add(1)
	}
	s.c.settled.Add(1)
	if message.HandedOff(m) {
		s.c.settledHanded.Add(1)
	}
	if s.draining.Load() {
		ping(s.settledCh)
	}
}

// onLeaseEvent reports lease events and lets the streams' ack deadline
// follow the adaptive lease deadline, so a message's deadline before its
// receipt modack is already the one its processing needs.
func (s *Subscriber) onLeaseEvent(e event.Event) {
	s.tel.onEvent(e)
	if e.Kind != event.Extend || e.Deadline == 0 {
		return
	}
	if src := s.srcReady.Load(); src != nil && src.StreamAckDeadline() != e.Deadline {
		src.SetStreamAckDeadline(e.Deadline)
	}
}

// acked is the acknowledger's completion hook: leases of acked messages
// are released only once the ack is final, so they are extended while a
// slow Acknowledge is on its way.
func (s *Subscriber) acked(ackIDs []string) {
	s.ext.ReleaseAcked(s.sub, ackIDs)
	s.c.ackFinal.Add(int64(len(ackIDs)))
}

func ping(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the subscriber's state and totals.
func (s *Subscriber) Stats() Stats {
	received := int64(s.c.received.Load())
	processing := s.processing()
	return Stats{
		Outstanding:      s.fc.Outstanding(),
		OutstandingBytes: s.fc.OutstandingBytes(),
		Leases:           s.ext.Len(),
		Buffered:         received - s.c.settled.Load() - processing,
		Processing:       processing,
		Acking:           max(0, int64(s.c.acked.Load())-s.c.ackFinal.Load()),
		Received:         uint64(received),
		Redelivered:      s.c.redelivered.Load(),
		Acked:            s.c.acked.Load(),
		Nacked:           s.c.nacked.Load(),
		NoOps:            s.c.noops.Load(),
		Expired:          s.c.expired.Load(),
		Extended:         s.c.extended.Load(),
		Reconnects:       s.c.reconnects.Load(),
		AckFailures:      s.c.ackFailures.Load(),
		AckDeadline:      s.ext.Deadline(),
		LastError:        s.c.err(),
	}
}

// processing is the number of messages handed to processing and not
// settled.
func (s *Subscriber) processing() int64 { return s.c.handed.Load() - s.c.settledHanded.Load() }

// reconnectTimeout maps the config's Unlimited to the source's RetryForever.
func reconnectTimeout(d time.Duration) time.Duration {
	if d == Unlimited {
		return source.RetryForever
	}
	return d
}
