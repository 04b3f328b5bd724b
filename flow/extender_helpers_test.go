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
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// testSub is the subscription of hand-made messages that no server sees
// (the extender ignores a message that names no subscription).
const testSub = "projects/p/subscriptions/s"

// modack is one captured ModifyAckDeadline request.
type modack struct {
	at    time.Time
	sub   string
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
	c.reqs = append(c.reqs, modack{at: time.Now(), sub: req.Subscription, ids: append([]string(nil), req.AckIds...), secs: req.AckDeadlineSeconds, bytes: proto.Size(req)})
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

func (e *events) fn() func(event.Event) {
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

// acker is the tests' stand-in for a source's settle path, attached to
// each message as a Holder: it records every outcome and, for an ack,
// acknowledges through the client directly (the acknowledger belongs to
// package source) before the message is Done, so the lease (also a
// Holder, which an acked message keeps until Done) lasts until the ack
// RPC has returned.
type acker struct {
	client pubsubpb.SubscriberClient // nil: no RPC
	mu     sync.Mutex
	out    map[*source.Message]uint32
	acked  int
}

func newAcker(client pubsubpb.SubscriberClient) *acker {
	return &acker{client: client, out: map[*source.Message]uint32{}}
}

// hold attaches a to m.
func (a *acker) hold(m *source.Message) {
	message.Of(m).Hold(m, new(message.HoldNode), a)
}

func (a *acker) Settled(mi any, o uint32) {
	m := mi.(*source.Message)
	a.mu.Lock()
	a.out[m] = o
	a.mu.Unlock()
	if o == message.Ack && a.client != nil {
		_, err := a.client.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: m.Subscription, AckIds: []string{m.AckID}})
		if err == nil {
			a.mu.Lock()
			a.acked++
			a.mu.Unlock()
		}
	}
}

func (a *acker) Done(any, time.Time) {}

// outcome is the outcome a saw for m (message.Pending if none).
func (a *acker) outcome(m *source.Message) uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out[m]
}

// settled is how many messages a saw settled.
func (a *acker) settled() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.out)
}

// withOutcome returns the messages a saw settled with o.
func (a *acker) withOutcome(o uint32) []*source.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*source.Message
	for m, got := range a.out {
		if got == o {
			out = append(out, m)
		}
	}
	return out
}

// heldPath is a settle path whose Done the test calls (message.Of(m).Done):
// a settled message the server still counts (its ack not final yet).
type heldPath struct {
	mu      sync.Mutex
	settled map[*source.Message]uint32
}

func (p *heldPath) Settle(mi any, o uint32, _ time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.settled == nil {
		p.settled = map[*source.Message]uint32{}
	}
	p.settled[mi.(*source.Message)] = o
}

// bind gives m the settle path p.
func (p *heldPath) bind(m *source.Message) *source.Message {
	message.Of(m).Path = p
	return m
}

// fixture is a pubsubtest server on bufconn (usable inside a synctest
// bubble when made inside it) with one topic and one subscription.
type fixture struct {
	fix    *pubsubtest.Fixture
	srv    *pubsubtest.Server
	client pubsubpb.SubscriberClient
	topic  string
	sub    string
	eo     bool
}

func newFixture(t *testing.T, sc pubsubtest.SubscriptionConfig, opts ...pubsubtest.Option) *fixture {
	t.Helper()
	sc.Name = "sub"
	f := pubsubtest.NewFixture(t, sc, append([]pubsubtest.Option{pubsubtest.WithBufconn()}, opts...)...)
	return &fixture{fix: f, srv: f.Server, client: f.Subscriber, topic: f.Topic, sub: f.Sub, eo: sc.EnableExactlyOnceDelivery}
}

func (f *fixture) publish(t *testing.T, n int) {
	t.Helper()
	f.fix.Backlog(t, n)
}

// pull receives up to n messages by unary Pull (the lease tests need
// received messages, not a streaming source) and attaches a to each (nil:
// none).
func (f *fixture) pull(t *testing.T, n int, a *acker) []*source.Message {
	t.Helper()
	resp, err := f.client.Pull(context.Background(), &pubsubpb.PullRequest{Subscription: f.sub, MaxMessages: int32(n)})
	if err != nil {
		t.Fatal(err)
	}
	out := fromPull(resp.ReceivedMessages, f.sub, f.eo, time.Now())
	if a != nil {
		for _, m := range out {
			a.hold(m)
		}
	}
	return out
}

// fromPull builds messages from a unary Pull's answer, as a source decodes
// a StreamingPull response (with no settle path).
func fromPull(rms []*pubsubpb.ReceivedMessage, sub string, eo bool, now time.Time) []*source.Message {
	out := make([]*source.Message, 0, len(rms))
	for _, rm := range rms {
		pm := rm.GetMessage()
		m := &source.Message{
			ID:              pm.GetMessageId(),
			AckID:           rm.GetAckId(),
			Data:            pm.GetData(),
			Attributes:      pm.GetAttributes(),
			OrderingKey:     pm.GetOrderingKey(),
			DeliveryAttempt: int(rm.GetDeliveryAttempt()),
			ReceiveTime:     now,
			Subscription:    sub,
			ExactlyOnce:     eo,
		}
		if ts := pm.GetPublishTime(); ts != nil {
			m.PublishTime = ts.AsTime()
		}
		message.Of(m).Size = proto.Size(rm)
		out = append(out, m)
	}
	return out
}

// handMade returns n messages of subscription sub with ack ids idLen long,
// not from any server.
func handMade(sub string, n, idLen int, eo bool) []*source.Message {
	out := make([]*source.Message, n)
	for i := range out {
		id := fmt.Sprintf("%0*d", idLen, i)
		out[i] = &source.Message{AckID: id, Subscription: sub, ExactlyOnce: eo, ReceiveTime: time.Now()}
	}
	return out
}

// one is a batch of one message, for Extender.track.
func one(m *source.Message) []*source.Message { return []*source.Message{m} }

func newExt(t *testing.T, client pubsubpb.SubscriberClient, cfg ExtenderConfig) *Extender {
	t.Helper()
	e, err := NewExtender(client, cfg)
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
