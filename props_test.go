package pubsubflow

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// propsServer says one thing in GetSubscription (told) and another in
// every StreamingPull response's subscription_properties (props): its one
// stream sends responses of per messages, all on ordering key "k", and it
// records the acks in the order they come.
type propsServer struct {
	fakeServer
	told           *pubsubpb.Subscription
	props          *pubsubpb.StreamingPullResponse_SubscriptionProperties
	responses, per int
	mu             sync.Mutex
	acked          []string
}

func (p *propsServer) GetSubscription(_ context.Context, in *pubsubpb.GetSubscriptionRequest) (*pubsubpb.Subscription, error) {
	return &pubsubpb.Subscription{Name: in.Subscription, EnableMessageOrdering: p.told.GetEnableMessageOrdering(),
		EnableExactlyOnceDelivery: p.told.GetEnableExactlyOnceDelivery()}, nil
}

func (p *propsServer) StreamingPull(s pubsubpb.Subscriber_StreamingPullServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	for r := range p.responses {
		resp := &pubsubpb.StreamingPullResponse{SubscriptionProperties: p.props}
		for i := range p.per {
			id := fmt.Sprint(r*p.per + i)
			resp.ReceivedMessages = append(resp.ReceivedMessages, &pubsubpb.ReceivedMessage{
				AckId: "ack-" + id, Message: &pubsubpb.PubsubMessage{MessageId: id, OrderingKey: "k", Data: []byte(id)},
			})
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

func (p *propsServer) Acknowledge(_ context.Context, in *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acked = append(p.acked, in.AckIds...)
	return &emptypb.Empty{}, nil
}

func (p *propsServer) ackCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// records is a slog.Handler that keeps every record, for tests.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, rec.Clone())
	return nil
}

// warnings returns the Warn records whose attribute "property" is prop,
// each as its attributes.
func (r *records) warnings(prop string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, rec := range r.all {
		attrs := map[string]any{}
		rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
		if rec.Level == slog.LevelWarn && attrs["property"] == prop {
			out = append(out, attrs)
		}
	}
	return out
}

// keyWatch counts the handlers running at once on key "k" and the order
// in which they started.
type keyWatch struct {
	running, peak atomic.Int64
	mu            sync.Mutex
	order         []string
}

func (w *keyWatch) enter(ms ...*Message) {
	n := w.running.Add(1)
	for old := w.peak.Load(); n > old && !w.peak.CompareAndSwap(old, n); old = w.peak.Load() {
	}
	w.mu.Lock()
	for _, m := range ms {
		w.order = append(w.order, m.ID)
	}
	w.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // work: room for another handler to overlap
	w.running.Add(-1)
}

// check fails t unless at most one handler ran at a time and the
// messages started in the order sent.
func (w *keyWatch) check(t *testing.T, total int) {
	t.Helper()
	want := make([]string, total)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.peak.Load(); p != 1 {
		t.Errorf("up to %d handlers ran at once on key \"k\", want 1", p)
	}
	if !slices.Equal(w.order, want) {
		t.Errorf("handled in order %v, want %v", w.order, want)
	}
}

// TestResponsePropertiesDecideOrdering: GetSubscription says the
// subscription does not order by key, every response's properties say it
// does. Run with 4 workers, and RunBatches with 4, handle the messages of
// key "k" one at a time in order, and the contradiction is warned once.
func TestResponsePropertiesDecideOrdering(t *testing.T) {
	for _, batches := range []bool{false, true} {
		t.Run(fmt.Sprintf("batches=%v", batches), func(t *testing.T) {
			p := &propsServer{told: &pubsubpb.Subscription{}, responses: 6, per: 5,
				props: &pubsubpb.StreamingPullResponse_SubscriptionProperties{MessageOrderingEnabled: true}}
			logs := &records{}
			s, err := NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{
				Conn: serveFake(t, p), Streams: 1, Logger: slog.New(logs)})
			if err != nil {
				t.Fatal(err)
			}
			total := p.responses * p.per
			var w keyWatch
			var marked atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				if !batches {
					done <- s.Run(ctx, 4, func(_ context.Context, m *Message) error {
						if m.Ordered {
							marked.Add(1)
						}
						w.enter(m)
						return nil
					})
					return
				}
				done <- s.RunBatches(ctx, 4, BatchOptions{Size: 2}, func(_ context.Context, ms []*Message) error {
					w.enter(ms...)
					marked.Add(int64(len(ms)))
					return nil
				})
			}()
			waitFor(t, "every message acked", 30*time.Second, func() bool { return p.ackCount() == total })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			w.check(t, total)
			if !batches && marked.Load() != int64(total) {
				t.Errorf("%d messages marked Ordered, want %d", marked.Load(), total)
			}
			warns := logs.warnings("message_ordering")
			if len(warns) != 1 || warns[0]["get_subscription"] != false || warns[0]["stream"] != true {
				t.Fatalf("ordering warnings %v, want one saying GetSubscription false, the stream true", warns)
			}
		})
	}
}

// TestResponsePropertiesDecideExactlyOnce: GetSubscription says no
// exactly-once delivery, the responses say exactly-once. Each message is
// processed as exactly-once (its ack has a Result the server confirms),
// and the contradiction is warned once.
func TestResponsePropertiesDecideExactlyOnce(t *testing.T) {
	p := &propsServer{told: &pubsubpb.Subscription{}, responses: 3, per: 4,
		props: &pubsubpb.StreamingPullResponse_SubscriptionProperties{ExactlyOnceDeliveryEnabled: true}}
	logs := &records{}
	s, err := NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{
		Conn: serveFake(t, p), Streams: 1, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	total := p.responses * p.per
	var confirmed atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, s, 4, func(ctx context.Context, m *Message) error {
		if !m.ExactlyOnce || !m.Ack() || m.Result() == nil {
			return fmt.Errorf("message %s: ExactlyOnce %v, Result %v", m.ID, m.ExactlyOnce, m.Result())
		}
		wctx, stop := context.WithTimeout(ctx, 10*time.Second)
		defer stop()
		if err := m.Result().Get(wctx); err == nil {
			confirmed.Add(1)
		}
		return nil
	})
	waitFor(t, "every ack confirmed", 30*time.Second, func() bool { return confirmed.Load() == int64(total) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	warns := logs.warnings("exactly_once_delivery")
	if len(warns) != 1 || warns[0]["get_subscription"] != false || warns[0]["stream"] != true {
		t.Fatalf("exactly-once warnings %v, want one saying GetSubscription false, the stream true", warns)
	}
	if w := logs.warnings("message_ordering"); len(w) != 0 {
		t.Fatalf("ordering warnings %v, want none (both say unordered)", w)
	}
}

// stallStage is a stage of the user's that hands nothing on: it holds
// each message it takes until release is closed (or its ctx ends), then
// drops it, for its source to nack when the pipeline is over.
type stallStage struct {
	got     chan struct{} // closed once it holds a message
	release chan struct{}
	once    sync.Once
}

func newStall() *stallStage {
	return &stallStage{got: make(chan struct{}), release: make(chan struct{})}
}

func (st *stallStage) hold(ctx context.Context) {
	st.once.Do(func() { close(st.got) })
	select {
	case <-st.release:
	case <-ctx.Done():
	}
}

func (st *stallStage) Run(g *stage.Group, in <-chan *Message) <-chan *Message {
	out := make(chan *Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		for {
			if _, ok := stage.Recv(ctx, in); !ok {
				return nil
			}
			st.hold(ctx)
		}
	})
	return out
}

// batchStall is stallStage taking batches, as the Subscriber's source
// hands them on.
type batchStall struct{ *stallStage }

func (st batchStall) RunBatches(g *stage.Group, in <-chan []*Message) <-chan []*Message {
	out := make(chan []*Message)
	g.Go(func(ctx context.Context) error {
		defer close(out)
		for {
			if _, ok := stage.Recv(ctx, in); !ok {
				return nil
			}
			st.hold(ctx)
		}
	})
	return out
}

// switchGoroutines counts the goroutines of Process's switch (switchFlow).
func switchGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "pubsubflow.(*switchFlow).")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestProcessSwitchEndsWithClose: in a pipeline of the user's, Source →
// Process → Acknowledge, whose context Close does not own, the goroutines
// of Process's switch (on a subscription not said to order by key) end
// once Close has given up on the runs at its drain timeout, as Run's
// pipelines are cancelled then: whether a stage of the user's before
// Process stalls (taking batches, or one message at a time) or the
// handler does, ignoring its ctx. Before, they stayed blocked until the
// pipeline's own context ended (the proptest machine's invariant 7).
func TestProcessSwitchEndsWithClose(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stallInput bool
		batches    bool
	}{
		{"input stalled, batches", true, true},
		{"input stalled, one at a time", true, false},
		{"handler stalled", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{resp: &pubsubpb.StreamingPullResponse{ReceivedMessages: []*pubsubpb.ReceivedMessage{
				{AckId: "a1", Message: &pubsubpb.PubsubMessage{MessageId: "1"}}}}}
			s, err := NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{
				Conn: serveFake(t, f), Streams: 1, DrainTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			st := newStall()
			var flows []stage.Flow[*Message, *Message]
			switch {
			case tc.stallInput && tc.batches:
				flows = append(flows, batchStall{st})
			case tc.stallInput:
				flows = append(flows, st)
			}
			flows = append(flows, s.Process(2, func(context.Context, *Message) error {
				if !tc.stallInput {
					st.hold(context.Background()) // a handler that ignores its ctx
				}
				return nil
			}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- pipeline.FromContext(ctx, s.Source()).Via(flows...).To(s.Acknowledge()) }()
			select {
			case <-st.got:
			case <-time.After(10 * time.Second):
				t.Fatal("the message never reached the stalled stage")
			}
			// The switch's goroutines start with the pipeline, not with the
			// message; wait for them so the test tests what it names.
			waitFor(t, "a goroutine of the switch running before Close", 5*time.Second, func() bool { return switchGoroutines() > 0 })
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			waitFor(t, "the switch's goroutines to end after Close", 2*time.Second, func() bool { return switchGoroutines() == 0 })
			close(st.release)
			cancel()
			<-done
		})
	}
}
