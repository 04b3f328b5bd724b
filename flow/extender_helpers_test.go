package flow

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/testfix"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// modack is one captured ModifyAckDeadline request.
type modack struct {
	at    time.Time
	ids   []string
	secs  int32
	bytes int
}

// capture wraps a SubscriberClient and records every ModifyAckDeadline
// request; a nil inner client answers them with success (a stub).
type capture struct {
	pubsubpb.SubscriberClient
	mu   sync.Mutex
	reqs []modack
	// hook, if set, replaces the call (for stubbed failures and hangs).
	hook func(ctx context.Context, req *pubsubpb.ModifyAckDeadlineRequest) error
}

func (c *capture) ModifyAckDeadline(ctx context.Context, req *pubsubpb.ModifyAckDeadlineRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, modack{at: time.Now(), ids: append([]string(nil), req.AckIds...), secs: req.AckDeadlineSeconds, bytes: proto.Size(req)})
	hook := c.hook
	c.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, req); err != nil {
			return nil, err
		}
		return &emptypb.Empty{}, nil
	}
	if c.SubscriberClient == nil {
		return &emptypb.Empty{}, nil
	}
	return c.SubscriberClient.ModifyAckDeadline(ctx, req, opts...)
}

func (c *capture) setHook(h func(ctx context.Context, req *pubsubpb.ModifyAckDeadlineRequest) error) {
	c.mu.Lock()
	c.hook = h
	c.mu.Unlock()
}

func (c *capture) requests() []modack {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]modack(nil), c.reqs...)
}

// events collects events with the time they were emitted.
type events struct {
	mu  sync.Mutex
	evs []timedEvent
}

type timedEvent struct {
	event.Event
	at time.Time
}

func (e *events) fn() event.Func {
	return func(ev event.Event) {
		e.mu.Lock()
		e.evs = append(e.evs, timedEvent{ev, time.Now()})
		e.mu.Unlock()
	}
}

// count sums Count over events of kind k.
func (e *events) count(k event.Kind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.evs {
		if ev.Kind == k {
			n += ev.Count
		}
	}
	return n
}

func (e *events) of(k event.Kind) []timedEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []timedEvent
	for _, ev := range e.evs {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// settler is the tests' settle path: it acks through the client directly
// (the acknowledger is another package) and releases the lease once the
// ack RPC has returned.
type settler struct {
	ext    *Extender
	client pubsubpb.SubscriberClient // nil: no RPC
	mu     sync.Mutex
	out    map[*message.Message]message.Outcome
}

func newSettler(ext *Extender, client pubsubpb.SubscriberClient) *settler {
	return &settler{ext: ext, client: client, out: map[*message.Message]message.Outcome{}}
}

func (s *settler) Settle(m *message.Message, o message.Outcome, _ time.Duration) {
	s.mu.Lock()
	s.out[m] = o
	s.mu.Unlock()
	if o == message.Ack && s.client != nil {
		_, _ = s.client.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: m.Subscription, AckIds: []string{m.AckID}})
	}
	s.ext.Release(m, o)
}

func (s *settler) outcome(m *message.Message) message.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out[m]
}

// fixture is a pubsubtest server on bufconn (usable inside a synctest
// bubble when made inside it) with one topic and one subscription.
type fixture struct {
	fix    *testfix.Fixture
	srv    *pubsubtest.Server
	client pubsubpb.SubscriberClient
	topic  string
	sub    string
	eo     bool
}

func newFixture(t *testing.T, sc pubsubtest.SubscriptionConfig, opts ...pubsubtest.Option) *fixture {
	t.Helper()
	sc.Name = "sub"
	f := testfix.New(t, sc, append([]pubsubtest.Option{pubsubtest.WithBufconn()}, opts...)...)
	return &fixture{fix: f, srv: f.Server, client: f.Subscriber, topic: f.Topic, sub: f.Sub, eo: sc.EnableExactlyOnceDelivery}
}

func (f *fixture) publish(t *testing.T, n int) {
	t.Helper()
	f.fix.Backlog(t, n)
}

// pull receives up to n messages by unary Pull (the lease tests need
// received messages, not a streaming source) and binds them to s.
func (f *fixture) pull(t *testing.T, n int, s message.Settler) []*message.Message {
	t.Helper()
	resp, err := f.client.Pull(context.Background(), &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: int32(n)})
	if err != nil {
		t.Fatal(err)
	}
	props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{ExactlyOnceDeliveryEnabled: f.eo}
	var out []*message.Message
	for _, rm := range resp.ReceivedMessages {
		m := message.FromReceived(rm, f.sub, props, time.Now())
		if s != nil {
			message.Bind(m, s)
		}
		out = append(out, m)
	}
	return out
}

// handMade returns n messages with the given ack ids length, not from any
// server.
func handMade(sub string, n, idLen int, eo bool) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		id := fmt.Sprintf("%0*d", idLen, i)
		out[i] = &message.Message{AckID: id, Subscription: sub, ExactlyOnce: eo, ReceiveTime: time.Now()}
	}
	return out
}

func newExt(t *testing.T, client pubsubpb.SubscriberClient, sub string, cfg ExtenderConfig) *Extender {
	t.Helper()
	e, err := NewExtender(client, sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

const codesUnavailable = codes.Unavailable

func subCfg(ackDeadline time.Duration, eo bool) pubsubtest.SubscriptionConfig {
	return pubsubtest.SubscriptionConfig{AckDeadline: ackDeadline, EnableExactlyOnceDelivery: eo}
}
