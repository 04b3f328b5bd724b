package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// ErrClosed is returned by Run and Source pipelines on a subscriber that
// was closed (the same error as source.ErrClosed).
var ErrClosed = source.ErrClosed

// Subscriber consumes one subscription. It is the library's operators
// composed for the common case:
//
//	source.Subscribe ─ receipt steps on decode: EagerTrack, FlowGate
//	    ══batches══▶ [your stages, or Run's workers] ─▶ sink.Acknowledge
//
// Source and Acknowledge are the two ends for custom topologies; Run is
// the whole thing with a handler. Close drains and stops it.
type Subscriber struct {
	cfg    SubscriberConfig
	sub    string
	conn   *grpc.ClientConn // dialed by us, closed by Close
	client pubsubpb.SubscriberClient

	src     *source.Source // with the receipt steps fused in, for Source
	runSrc  *source.Source // the same, for Run (processing counts in handlers)
	runBook *book
	ext     *flow.Extender
	fc      *flow.FlowControl
	policy  sink.Policy
	tel     *telemetry
	tracing *subTracer // nil unless TracerProvider is set
	c       counters
	ordered bool                         // GetSubscription (or cfg.Ordering) said it orders by key
	told    *toldProps                   // what GetSubscription said; nil if not asked or not answered
	owned   atomic.Pointer[message.Path] // the settle path in owners

	life *lifecycle
}

// NewSubscriber validates cfg, connects, and prepares a subscriber for
// subscription; nothing is received until Run or Source runs. Unless
// cfg.Ordering is set it asks the server whether the subscription orders
// by key, and fails if it cannot tell (but on PERMISSION_DENIED or
// UNIMPLEMENTED, warned). A failed NewSubscriber leaves nothing running.
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
	s := &Subscriber{cfg: cfg, sub: subscription, life: newLifecycle(), ordered: cfg.Ordering}
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	err := s.detectOrdering(ctx) // before build starts any goroutine
	if err == nil {
		err = s.build()
	}
	if err != nil {
		s.closeParts(true)
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
		conn, err := Dial(ctx, s.cfg.Connect)
		if err != nil {
			return fmt.Errorf("pubsubflow: connecting for %s: %w", s.sub, err)
		}
		s.conn, s.client = conn, pubsubpb.NewSubscriberClient(conn)
	}
	return nil
}

func (s *Subscriber) build() error {
	var err error
	s.tel, err = newTelemetry(s.sub, s.cfg.MeterProvider, s.Stats)
	if err != nil {
		return fmt.Errorf("pubsubflow: telemetry: %w", err)
	}
	if s.cfg.TracerProvider != nil {
		s.tracing = newSubTracer(s.cfg.TracerProvider, s.sub)
	}
	srcCfg, extCfg, policy := s.cfg.parts(s.sub)
	s.ext, err = flow.NewExtender(s.client, extCfg)
	if err != nil {
		return err
	}
	s.fc = flow.NewFlowControl(s.cfg.MaxOutstandingMessages, s.cfg.MaxOutstandingBytes)
	s.policy = policy
	src, err := source.Subscribe(s.client, srcCfg)
	if err != nil {
		return err
	}
	gate := flow.FlowGate(s.fc)
	gate.Logger = s.cfg.Logger
	base := src.With(flow.EagerTrack(s.ext, 0), gate)
	s.runBook = &book{s: s}
	s.src = base.With(&book{s: s, onHandOff: true})
	s.runSrc = base.With(s.runBook)
	return nil
}

// detectOrdering asks the server whether the subscription orders by key.
func (s *Subscriber) detectOrdering(ctx context.Context) error {
	if s.cfg.Ordering {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := s.client.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.sub})
	switch status.Code(err) {
	case codes.OK:
		s.told = &toldProps{ordered: got.GetEnableMessageOrdering(), exactlyOnce: got.GetEnableExactlyOnceDelivery()}
		s.ordered = got.GetEnableMessageOrdering()
		return nil
	case codes.Unimplemented:
		// gRPC maps an HTTP answer that is not gRPC at all (a 404 page) to
		// UNIMPLEMENTED.
		if strings.Contains(status.Convert(err).Message(), "unexpected HTTP status code") {
			endpoint := "the endpoint of SubscriberConfig.Conn/Client"
			if s.conn != nil {
				endpoint = "endpoint " + s.conn.Target()
			}
			return fmt.Errorf("pubsubflow: %s answered with HTTP, not Pub/Sub's gRPC API (a proxy, or a wrong port?): %w", endpoint, err)
		}
		fallthrough
	case codes.PermissionDenied:
		s.cfg.Logger.Warn("pubsubflow: cannot tell whether the subscription orders by key; set SubscriberConfig.Ordering if it does",
			"subscription", s.sub, "err", err)
		return nil
	}
	return fmt.Errorf("pubsubflow: asking whether %s orders by key (set SubscriberConfig.Ordering to skip): %w", s.sub, err)
}

// ClientID is the id sent on every stream of this subscriber.
func (s *Subscriber) ClientID() string { return s.src.ClientID() }

// Stats returns a snapshot of the subscriber's state and totals.
func (s *Subscriber) Stats() Stats {
	ss := s.src.Stats()
	es := s.ext.Stats()
	fc := s.fc
	processing := s.c.handed.Load() - s.c.settledHanded.Load()
	last := ss.LastError
	if p := s.c.panicked.Load(); p != nil {
		last = p
	}
	return Stats{
		Outstanding:      fc.Outstanding(),
		OutstandingBytes: fc.OutstandingBytes(),
		Leases:           es.Leases,
		Buffered:         ss.Unsettled - processing,
		Processing:       processing,
		Acking:           ss.Acking,
		Received:         ss.Received,
		Redelivered:      ss.Redelivered,
		Acked:            ss.Acked,
		Nacked:           ss.Nacked,
		NoOps:            ss.NoOps,
		Expired:          ss.Expired,
		Extended:         es.Extended,
		Reconnects:       ss.Reconnects,
		AckFailures:      ss.AckFailures,
		AckRefused:       ss.AckRefused,
		EmptyAckIDs:      ss.EmptyAckIDs,
		DuplicateAckIDs:  ss.DuplicateAckIDs,
		MissingMessages:  ss.MissingMessages,
		OverGrant:        uint64(fc.Stats().OverGrant),
		StreamsLost:      s.c.streamsLost.Load(),
		AckDeadline:      es.Deadline,
		LastError:        last,
	}
}

// Message is one received message (source.Message): handlers settle it
// with Ack, Nack, NackAfter or NoOp (the first outcome wins), or leave it
// to the outcome policy.
type Message = source.Message

// Outcome is what happens to a received message (source.Outcome).
type Outcome = source.Outcome

// The outcomes a policy may choose.
const (
	Ack       = source.Ack
	Nack      = source.Nack
	NackAfter = source.NackAfter
	NoOp      = source.NoOp
)
