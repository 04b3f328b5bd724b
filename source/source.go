package source

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/internal/batch"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Source is a running-or-ready StreamingPull source. It implements
// stage.Source[*message.Message]; Subscribe makes one.
type Source struct {
	client   pubsubpb.SubscriberClient
	cfg      Config // defaults applied
	clientID string

	deadline   atomic.Int32 // stream ack deadline in whole seconds
	deadlineMu sync.Mutex   // guards deadlineCh
	deadlineCh chan struct{}

	props atomic.Pointer[pubsubpb.StreamingPullResponse_SubscriptionProperties]

	hbAnswered atomic.Bool // the server has answered a heartbeat: watchdogs arm (keepalive.go)
}

var _ stage.Source[*message.Message] = (*Source)(nil)

// Subscribe validates cfg and returns a Source that reads the subscription
// through client when it runs. It opens nothing yet. client is typically
// pubsubpb.NewSubscriberClient(conn) for a connection from connect.Dial or
// a caller's own; tests may pass any implementation.
func Subscribe(client pubsubpb.SubscriberClient, cfg Config) (*Source, error) {
	if client == nil {
		return nil, errors.New("pubsubflow/source: nil SubscriberClient")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Source{client: client, cfg: cfg, clientID: cfg.ClientID, deadlineCh: make(chan struct{})}
	if s.clientID == "" {
		// Drawn once per Subscribe: every stream and every reconnect uses
		// it, so the server sees one subscriber.
		s.clientID = "pubsubflow-" + rand.Text()
	}
	s.deadline.Store(seconds(cfg.StreamAckDeadline))
	return s, nil
}

// SubscribeConn is Subscribe over a caller's connection (a
// *grpc.ClientConn from connect.Dial or elsewhere). The caller keeps
// owning the connection.
func SubscribeConn(cc grpc.ClientConnInterface, cfg Config) (*Source, error) {
	if cc == nil {
		return nil, errors.New("pubsubflow/source: nil connection")
	}
	return Subscribe(pubsubpb.NewSubscriberClient(cc), cfg)
}

// ClientID is the client id every stream of this source sends.
func (s *Source) ClientID() string { return s.clientID }

// Subscription is the subscription's full name.
func (s *Source) Subscription() string { return s.cfg.Subscription }

// StreamAckDeadline is the stream ack deadline now in force.
func (s *Source) StreamAckDeadline() time.Duration {
	return time.Duration(s.deadline.Load()) * time.Second
}

// SetStreamAckDeadline changes the stream ack deadline (clamped to
// 10–600 s, rounded up to whole seconds). Open streams announce it at
// once in a request that carries nothing else (the API allows
// stream_ack_deadline_seconds on any request); new streams start with it.
// The Subscriber calls it when its adaptive deadline moves.
func (s *Source) SetStreamAckDeadline(d time.Duration) {
	sec := seconds(min(max(d, MinStreamAckDeadline), MaxStreamAckDeadline))
	s.deadlineMu.Lock()
	defer s.deadlineMu.Unlock()
	if s.deadline.Swap(sec) != sec {
		close(s.deadlineCh)
		s.deadlineCh = make(chan struct{})
	}
}

// deadlineChanged returns a channel closed at the next deadline change.
func (s *Source) deadlineChanged() <-chan struct{} {
	s.deadlineMu.Lock()
	defer s.deadlineMu.Unlock()
	return s.deadlineCh
}

// Properties reports the subscription's properties as the server last sent
// them (false, false before the first response).
func (s *Source) Properties() (exactlyOnce, ordered bool) {
	p := s.props.Load()
	return p.GetExactlyOnceDeliveryEnabled(), p.GetMessageOrderingEnabled()
}

// Run starts the streams under g and returns the merged output, one
// element per received message (RunBatches without the batches).
func (s *Source) Run(g *stage.Group) <-chan *message.Message {
	return batch.Unbatch(g, s.RunBatches(g), s.unsentOne)
}

// RunBatches starts the streams under g and returns the merged output in
// batches (a response's worth, or all that arrived since the last hand-off).
// The channel is closed once every stream has stopped: when g is
// cancelled or after a terminal failure, which fails g with an error
// naming the subscription. Messages received but never handed on go to
// Config.Unsent (or are dropped; the server redelivers them).
func (s *Source) RunBatches(g *stage.Group) <-chan []*message.Message {
	out := make(chan []*message.Message)
	h := newHandoff()
	var wg sync.WaitGroup
	streamsDone := make(chan struct{})
	for i := range s.cfg.Streams {
		wg.Add(1)
		g.Go(func(ctx context.Context) error {
			defer wg.Done()
			return s.runStream(ctx, i, h)
		})
	}
	g.Go(func(context.Context) error {
		wg.Wait()
		close(streamsDone)
		return nil
	})
	g.Go(func(ctx context.Context) error {
		defer close(out)
		s.pump(ctx, h, out, streamsDone)
		return nil
	})
	return out
}

func (s *Source) unsent(ms []*message.Message) {
	if len(ms) > 0 && s.cfg.Unsent != nil {
		s.cfg.Unsent(ms)
	}
}

func (s *Source) unsentOne(m *message.Message) { s.unsent([]*message.Message{m}) }
