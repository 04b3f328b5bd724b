package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/api/option"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/tracing"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// spans is an in-memory trace pipeline: an exporter for what ended and a
// recorder that also sees what started, so a test can tell a span left
// open.
type spans struct {
	tp  *sdktrace.TracerProvider
	exp *tracetest.InMemoryExporter
	rec *tracetest.SpanRecorder
}

func newSpans(t testing.TB) *spans {
	s := &spans{exp: tracetest.NewInMemoryExporter(), rec: tracetest.NewSpanRecorder()}
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(s.exp), sdktrace.WithSpanProcessor(s.rec))
	t.Cleanup(func() { _ = s.tp.Shutdown(context.Background()) })
	return s
}

// useGlobal makes s the global provider (Google's clients trace through
// it) until the test ends.
func (s *spans) useGlobal(t testing.TB) {
	old := otel.GetTracerProvider()
	otel.SetTracerProvider(s.tp)
	t.Cleanup(func() { otel.SetTracerProvider(old) })
}

// named returns the ended spans called name.
func (s *spans) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, sp := range s.exp.GetSpans() {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

// byMessageID indexes spans by their messaging.message.id attribute.
func byMessageID(ss []tracetest.SpanStub) map[string]tracetest.SpanStub {
	out := map[string]tracetest.SpanStub{}
	for _, sp := range ss {
		if v, ok := attr(sp, semconv.MessagingMessageIDKey); ok {
			out[v.AsString()] = sp
		}
	}
	return out
}

func attr(sp tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range sp.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// checkAllEnded fails if a span that started has not ended.
func (s *spans) checkAllEnded(t testing.TB) {
	t.Helper()
	ended := map[trace.SpanID]bool{}
	for _, sp := range s.rec.Ended() {
		ended[sp.SpanContext().SpanID()] = true
	}
	for _, sp := range s.rec.Started() {
		if !ended[sp.SpanContext().SpanID()] {
			t.Errorf("span %q was left open", sp.Name())
		}
	}
}

func linksTo(sp tracetest.SpanStub, id trace.SpanID) bool {
	for _, l := range sp.Links {
		if l.SpanContext.SpanID() == id {
			return true
		}
	}
	return false
}

func googleClient(t testing.TB, e *env) *pubsub.Client {
	t.Helper()
	ctx := context.Background()
	conn, err := e.srv.Dial(ctx) // Google's client closes its connection
	if err != nil {
		t.Fatal(err)
	}
	c, err := pubsub.NewClientWithConfig(ctx, e.srv.Project(), &pubsub.ClientConfig{EnableOpenTelemetryTracing: true}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestTraceJoinsGooglePublisher: messages published by Google's client
// with tracing on are received by a Subscriber whose subscribe spans are
// children of Google's create spans, whose process spans are children of
// those and carried by the handler's ctx, and whose ack span links them.
func TestTraceJoinsGooglePublisher(t *testing.T) {
	sp := newSpans(t)
	sp.useGlobal(t)
	e := newEnv(t)
	ctx := context.Background()
	c := googleClient(t, e)

	const n = 5
	pub := c.Publisher(e.topic)
	var ids []string
	for i := range n {
		id, err := pub.Publish(ctx, &pubsub.Message{Data: fmt.Appendf(nil, "m%d", i)}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	pub.Stop()

	s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp})
	var handled atomic.Int64
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := s.Run(rctx, 2, func(ctx context.Context, m *Message) error {
		// Hold the messages until their receipt modacks have returned to
		// the client (their spans ended, after the events were added), so
		// each subscribe span records one.
		receipted := func() (n int) {
			for _, md := range sp.named("sub modack") {
				if v, _ := attr(md, tracing.AttrReceiptModack); v.AsBool() {
					n += len(md.Links)
				}
			}
			return n
		}
		for deadline := time.Now().Add(10 * time.Second); receipted() < n; {
			if time.Now().After(deadline) {
				t.Error("receipt modacks never returned")
				break
			}
			time.Sleep(time.Millisecond)
		}
		_, user := sp.tp.Tracer("user").Start(ctx, "user work")
		user.SetAttributes(semconv.MessagingMessageID(m.ID))
		user.End()
		if handled.Add(1) == n {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	creates := byMessageID(sp.named("topic create"))
	subscribes := byMessageID(sp.named("sub subscribe"))
	processes := byMessageID(sp.named("sub process"))
	users := byMessageID(sp.named("user work"))
	acks := sp.named("sub ack")
	modacks := sp.named("sub modack")
	if len(acks) == 0 {
		t.Fatal("no ack span")
	}
	for _, id := range ids {
		cr, ok := creates[id]
		if !ok {
			t.Fatalf("no create span from Google's client for %s", id)
		}
		sub, ok := subscribes[id]
		if !ok {
			t.Fatalf("no subscribe span for %s", id)
		}
		if sub.SpanContext.TraceID() != cr.SpanContext.TraceID() || sub.Parent.SpanID() != cr.SpanContext.SpanID() {
			t.Errorf("%s: subscribe span is not a child of the publisher's create span", id)
		}
		pr := processes[id]
		if pr.SpanContext.TraceID() != cr.SpanContext.TraceID() || pr.Parent.SpanID() != sub.SpanContext.SpanID() {
			t.Errorf("%s: process span is not a child of the subscribe span", id)
		}
		if u := users[id]; u.Parent.SpanID() != pr.SpanContext.SpanID() {
			t.Errorf("%s: the handler's span is not a child of the process span", id)
		}
		if v, _ := attr(sub, tracing.AttrResult); v.AsString() != tracing.ResultAcked {
			t.Errorf("%s: subscribe span result %q, want %q", id, v.AsString(), tracing.ResultAcked)
		}
		linked := false
		for _, a := range acks {
			linked = linked || linksTo(a, sub.SpanContext.SpanID())
		}
		if !linked || !linksToAny(sub, acks) {
			t.Errorf("%s: the ack span and the subscribe span are not linked both ways", id)
		}
		if v, _ := attr(sub, semconv.MessagingSystemKey); v.AsString() != "gcp_pubsub" {
			t.Errorf("%s: messaging.system = %q", id, v.AsString())
		}
		receipt := false
		for _, ev := range sub.Events {
			receipt = receipt || ev.Name == "receipt modack"
		}
		if !receipt || !linksToAny(sub, modacks) {
			t.Errorf("%s: no receipt modack event, or no link to a modack span", id)
		}
	}
	for _, m := range modacks {
		if v, _ := attr(m, tracing.AttrReceiptModack); !v.AsBool() {
			t.Errorf("modack span %v: is_receipt_modack not set", m.Attributes)
		}
	}
	sp.checkAllEnded(t)
}

func linksToAny(sp tracetest.SpanStub, to []tracetest.SpanStub) bool {
	for _, o := range to {
		if linksTo(sp, o.SpanContext.SpanID()) {
			return true
		}
	}
	return false
}

// TestTraceJoinsGoogleSubscriber: messages published by our Publisher with
// tracing on, under the caller's span, are received by Google's client
// with tracing on, whose subscribe spans are children of our create spans.
func TestTraceJoinsGoogleSubscriber(t *testing.T) {
	sp := newSpans(t)
	sp.useGlobal(t)
	e := newEnv(t)
	ctx := context.Background()

	p, err := publisher.New(e.srv.ClientConn(), e.topic, publisher.Config{TracerProvider: sp.tp})
	if err != nil {
		t.Fatal(err)
	}
	pctx, parent := sp.tp.Tracer("app").Start(ctx, "app request")
	const n = 5
	attrs := map[string]string{"k": "v"}
	var ids []string
	for i := range n {
		id, err := p.Publish(pctx, &publisher.Message{Data: fmt.Appendf(nil, "m%d", i), Attributes: attrs}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	parent.End()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(attrs) != 1 {
		t.Errorf("Publish modified the caller's attributes: %v", attrs)
	}

	c := googleClient(t, e)
	var mu sync.Mutex
	got := map[string]bool{}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = c.Subscriber(e.sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		got[m.ID] = true
		if len(got) == n {
			cancel()
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("Google's client received %d of %d", len(got), n)
	}

	creates := byMessageID(sp.named("topic create"))
	subscribes := byMessageID(sp.named("sub subscribe"))
	publishes := sp.named("topic publish")
	if len(publishes) == 0 {
		t.Fatal("no publish span")
	}
	for _, id := range ids {
		cr, ok := creates[id]
		if !ok {
			t.Fatalf("no create span for %s", id)
		}
		if cr.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s: create span is not a child of the caller's span", id)
		}
		if !linksToAny(cr, publishes) {
			t.Errorf("%s: create span not linked to a publish span", id)
		}
		sub, ok := subscribes[id]
		if !ok {
			t.Fatalf("no subscribe span from Google's client for %s", id)
		}
		if sub.SpanContext.TraceID() != parent.SpanContext().TraceID() || sub.Parent.SpanID() != cr.SpanContext.SpanID() {
			t.Errorf("%s: Google's subscribe span is not a child of our create span", id)
		}
	}
}

// TestTraceEndsSpansWithStatus: on an exactly-once subscription a
// confirmed ack ends its subscribe span with status Ok; messages nacked at
// shutdown end theirs as nacked; a lease dropped past the maximum
// extension ends its span as expired with an error; nothing is left open
// after Close.
func TestTraceEndsSpansWithStatus(t *testing.T) {
	sp := newSpans(t)
	e := newEnvSub(t, pubsubtest.SubscriptionConfig{EnableExactlyOnceDelivery: true})
	e.publish(t, 3, nil)
	s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp})
	var acked atomic.Int64
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Run(rctx, 1, func(ctx context.Context, m *Message) error {
		m.Ack()
		if err := m.Result().Get(ctx); err != nil {
			return err
		}
		if acked.Add(1) == 3 {
			cancel()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	subs := sp.named("sub subscribe")
	if len(subs) != 3 {
		t.Fatalf("%d subscribe spans, want 3", len(subs))
	}
	for _, sub := range subs {
		if sub.Status.Code != codes.Ok {
			t.Errorf("exactly-once ack confirmed: status %v, want Ok", sub.Status)
		}
		if v, _ := attr(sub, tracing.AttrExactlyOnce); !v.AsBool() {
			t.Error("exactly_once_delivery attribute not set")
		}
	}
	sp.checkAllEnded(t)
}

// TestTraceShutdownNacks: messages still buffered when the subscriber
// shuts down are nacked, and their spans end as nacked; the handler that
// was running ends its process span; nothing is left open.
func TestTraceShutdownNacks(t *testing.T) {
	sp := newSpans(t)
	e := newEnv(t)
	e.publish(t, 20, nil)
	s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp, DrainTimeout: 50 * time.Millisecond})
	started := make(chan struct{})
	var once sync.Once
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- s.Run(rctx, 1, func(ctx context.Context, m *Message) error {
			once.Do(func() { close(started) })
			<-ctx.Done() // held until shutdown gives up on it
			return ctx.Err()
		})
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no message reached the handler")
	}
	waitFor(t, "all 20 received", 10*time.Second, func() bool { return s.Stats().Received == 20 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	subs := sp.named("sub subscribe")
	if len(subs) != 20 {
		t.Fatalf("%d subscribe spans ended, want 20", len(subs))
	}
	for _, sub := range subs {
		if v, _ := attr(sub, tracing.AttrResult); v.AsString() != tracing.ResultNacked {
			t.Errorf("subscribe span result %q (status %v), want %q", v.AsString(), sub.Status, tracing.ResultNacked)
		}
	}
	procs := sp.named("sub process")
	if len(procs) != 1 || procs[0].Status.Code != codes.Error {
		t.Errorf("process spans %d, want 1 ended with an error status", len(procs))
	}
	sp.checkAllEnded(t)
}

// TestTraceExpiry: a message held past MaxExtension is dropped; its
// subscribe span ends as expired with an error status and an "expired"
// event, and its process span still ends when the handler returns.
func TestTraceExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp := newSpans(t)
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 1, nil)
		s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp, StreamAckDeadline: 10 * time.Second, MaxExtension: 20 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 1, func(hctx context.Context, m *Message) error {
			select { // past MaxExtension (a redelivery may start before Run drains)
			case <-time.After(time.Minute):
			case <-hctx.Done():
			}
			cancel()
			return nil
		})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The server redelivers the expired message, so later deliveries
		// have spans of their own (expired too, or nacked at shutdown).
		expiredSpans := 0
		for _, sub := range sp.named("sub subscribe") {
			if v, _ := attr(sub, tracing.AttrResult); v.AsString() != tracing.ResultExpired {
				continue
			}
			expiredSpans++
			if sub.Status.Code != codes.Error {
				t.Errorf("expired subscribe span status %v, want Error", sub.Status)
			}
			event := false
			for _, ev := range sub.Events {
				event = event || ev.Name == "expired"
			}
			if !event {
				t.Error("expired subscribe span without an expired event")
			}
		}
		if expiredSpans == 0 {
			t.Fatal("no subscribe span ended as expired")
		}
		if len(sp.named("sub process")) == 0 {
			t.Error("the process span did not end")
		}
		sp.checkAllEnded(t)
	})
}

// TestTraceProcessStage: Subscriber.Process in a pipeline of one's own
// runs the handler under its process span too.
func TestTraceProcessStage(t *testing.T) {
	sp := newSpans(t)
	e := newEnv(t)
	e.publish(t, 10, nil)
	s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp})
	var handled atomic.Int64
	var bad atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := pipeline.FromContext(ctx, s.Source()).Via(s.Process(4, func(ctx context.Context, m *Message) error {
		if !trace.SpanContextFromContext(ctx).IsValid() || trace.SpanContextFromContext(ctx).SpanID() == message.Of(m).Trace.Subscribe.SpanContext().SpanID() {
			bad.Add(1)
		}
		if handled.Add(1) == 10 {
			cancel()
		}
		return nil
	})).To(s.Acknowledge())
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if bad.Load() != 0 {
		t.Fatalf("%d handlers ran without their process span in ctx", bad.Load())
	}
	if n := len(sp.named("sub process")); n != 10 {
		t.Fatalf("%d process spans, want 10", n)
	}
	sp.checkAllEnded(t)
}

// TestTraceAbandonedHandler: Close gives up on a handler that ignores its
// ctx past the drain timeout; the handler's process span is ended with an
// error status by Close, and nothing is left open.
func TestTraceAbandonedHandler(t *testing.T) {
	sp := newSpans(t)
	e := newEnv(t)
	e.publish(t, 1, nil)
	s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp, DrainTimeout: 20 * time.Millisecond})
	started, release := make(chan struct{}), make(chan struct{})
	done := runAsync(context.Background(), s, 1, func(ctx context.Context, m *Message) error {
		close(started)
		<-release // ignores ctx
		return nil
	})
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	procs := sp.named("sub process")
	if len(procs) != 1 || procs[0].Status.Code != codes.Error {
		t.Fatalf("process spans %v, want one ended by Close with an error status", procs)
	}
	sp.checkAllEnded(t)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestTraceExactlyOnceAckFails: an exactly-once ack the server refuses for
// good ends the message's subscribe span with an error status, and the ack
// span records the failed RPC.
func TestTraceExactlyOnceAckFails(t *testing.T) {
	sp := newSpans(t)
	e := newEnvSub(t, pubsubtest.SubscriptionConfig{EnableExactlyOnceDelivery: true})
	e.publish(t, 1, nil)
	s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp})
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ackErr error
	if err := s.Run(rctx, 1, func(ctx context.Context, m *Message) error {
		e.srv.FailNextAckIDs(1, "PERMANENT_FAILURE_INVALID_ACK_ID")
		m.Ack()
		ackErr = m.Result().Get(ctx)
		cancel()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ackErr == nil {
		t.Fatal("the injected ack failure did not reach the Result")
	}
	subs := sp.named("sub subscribe")
	if len(subs) == 0 {
		t.Fatal("no subscribe span")
	}
	if first := subs[0]; first.Status.Code != codes.Error {
		t.Errorf("refused exactly-once ack: subscribe span status %v, want Error", first.Status)
	}
	failedRPC := false
	for _, a := range sp.named("sub ack") {
		failedRPC = failedRPC || a.Status.Code == codes.Error
	}
	if !failedRPC {
		t.Error("no ack span with an error status")
	}
	sp.checkAllEnded(t)
}
