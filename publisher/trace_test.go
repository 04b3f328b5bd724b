package publisher

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pubsubflow/pubsubflow/internal/carrier"
)

// pstestTopic starts Google's fake server with topic t, over real gRPC.
func pstestTopic(t *testing.T) (*pstest.Server, *grpc.ClientConn, string) {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	const topic = "projects/p/topics/topic"
	if _, err := pubsubpb.NewPublisherClient(conn).CreateTopic(context.Background(), &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	return srv, conn, topic
}

func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// TestTraceSpans: each message gets a create span (child of the caller's
// span, with its message id) whose context travels in the message's
// googclient_traceparent attribute; flow-control and batching spans sit
// under it; the publish span is linked both ways to the messages it
// carried; the caller's attributes are left alone.
func TestTraceSpans(t *testing.T) {
	srv, conn, topic := pstestTopic(t)
	exp := tracetest.NewInMemoryExporter()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p, err := New(conn, topic, Config{TracerProvider: tp, MaxMessages: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("app").Start(context.Background(), "app")
	attrs := map[string]string{"k": "v"}
	const n = 4
	ids := map[string]bool{}
	var rs []*Result
	for range n {
		rs = append(rs, p.Publish(ctx, &Message{Data: []byte("x"), Attributes: attrs}))
	}
	for _, r := range rs {
		ids[mustGet(t, r)] = true
	}
	parent.End()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(attrs) != 1 {
		t.Fatalf("the caller's attributes were modified: %v", attrs)
	}

	creates := spansNamed(exp, "topic create")
	if len(creates) != n {
		t.Fatalf("%d create spans, want %d", len(creates), n)
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range creates {
		byID[s.SpanContext.SpanID()] = s
		if s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Error("create span is not a child of the caller's span")
		}
		if s.SpanKind != trace.SpanKindProducer {
			t.Errorf("create span kind %v", s.SpanKind)
		}
		var id string
		for _, kv := range s.Attributes {
			if kv.Key == semconv.MessagingMessageIDKey {
				id = kv.Value.AsString()
			}
		}
		if !ids[id] {
			t.Errorf("create span message id %q is not a published id", id)
		}
		if len(s.Links) != 1 {
			t.Errorf("create span has %d links, want 1 (its publish span)", len(s.Links))
		}
	}
	for _, name := range []string{"publisher flow control", "publisher batching"} {
		ss := spansNamed(exp, name)
		if len(ss) != n {
			t.Fatalf("%d %q spans, want %d", len(ss), name, n)
		}
		for _, s := range ss {
			if _, ok := byID[s.Parent.SpanID()]; !ok {
				t.Errorf("%q span is not a child of a create span", name)
			}
		}
	}
	pubs := spansNamed(exp, "topic publish")
	if len(pubs) != n/2 {
		t.Fatalf("%d publish spans, want %d (batches of 2)", len(pubs), n/2)
	}
	for _, s := range pubs {
		if len(s.Links) != 2 {
			t.Errorf("publish span links %d messages, want 2", len(s.Links))
		}
		for _, l := range s.Links {
			c, ok := byID[l.SpanContext.SpanID()]
			if !ok || c.Links[0].SpanContext.SpanID() != s.SpanContext.SpanID() {
				t.Error("publish span and create span are not linked both ways")
			}
		}
	}
	// On the wire: each message carries its create span's context.
	for _, m := range srv.Messages() {
		tp := m.Attributes["googclient_traceparent"]
		found := false
		for id, s := range byID {
			found = found || tp == "00-"+s.SpanContext.TraceID().String()+"-"+id.String()+"-01"
		}
		if !found || m.Attributes["k"] != "v" {
			t.Errorf("message attributes %v: no traceparent of a create span", m.Attributes)
		}
	}
	if len(rec.Started()) != len(rec.Ended()) {
		t.Errorf("%d spans started, %d ended", len(rec.Started()), len(rec.Ended()))
	}
}

// TestTraceNoValidSpanNoInjection: with a provider whose spans carry no
// valid context (the no-op provider) and no span in the caller's context,
// nothing is added to the message.
func TestTraceNoValidSpanNoInjection(t *testing.T) {
	srv, conn, topic := pstestTopic(t)
	p, err := New(conn, topic, Config{TracerProvider: noop.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, p.Publish(context.Background(), &Message{Data: []byte("x")}))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range srv.Messages() {
		if len(m.Attributes) != 0 {
			t.Errorf("attributes %v, want none", m.Attributes)
		}
	}
}

// TestTraceRefusedMessage: a message Publish refuses ends its create span
// at once with an error status.
func TestTraceRefusedMessage(t *testing.T) {
	_, conn, topic := pstestTopic(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p, err := New(conn, topic, Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Publish(context.Background(), &Message{Data: []byte("x"), OrderingKey: "k"}).Get(context.Background())
	if !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("err %v, want ErrInvalidMessage", err)
	}
	cs := spansNamed(exp, "topic create")
	if len(cs) != 1 || cs[0].Status.Code != codes.Error {
		t.Fatalf("create spans %+v, want one with an error status", cs)
	}
}

// TestTraceUnsampled: a message whose create span the sampler drops gets
// no other span, its batch no publish span, and it still carries its
// (unsampled) trace context, so that a subscriber honours the decision;
// the caller's attributes are left alone.
func TestTraceUnsampled(t *testing.T) {
	srv, conn, topic := pstestTopic(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p, err := New(conn, topic, Config{TracerProvider: tp, MaxMessages: 2})
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]string{"k": "v"}
	var rs []*Result
	for range 3 {
		rs = append(rs, p.Publish(context.Background(), &Message{Data: []byte("x"), Attributes: attrs}))
	}
	for _, r := range rs {
		mustGet(t, r)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Started()); n != 0 {
		t.Errorf("%d spans recorded, want none", n)
	}
	if len(attrs) != 1 {
		t.Fatalf("the caller's attributes were modified: %v", attrs)
	}
	msgs := srv.Messages()
	if len(msgs) != 3 {
		t.Fatalf("%d messages on the server, want 3", len(msgs))
	}
	for _, m := range msgs {
		tp := m.Attributes["googclient_traceparent"]
		if len(tp) != 55 || !strings.HasPrefix(tp, "00-") || !strings.HasSuffix(tp, "-00") || m.Attributes["k"] != "v" {
			t.Errorf("message attributes %v: want k and an unsampled traceparent", m.Attributes)
		}
	}
}

// TestTraceUnsampledTraceParent: an unsampled message carries exactly
// what the W3C propagator would inject for its create span (version 00,
// its ids, flags 00), as Google's clients do for any valid span context,
// so that a subscriber whose sampler follows the parent (the SDK's
// default, ParentBased) extracts a remote, unsampled parent and drops
// the trace as the publisher decided.
func TestTraceUnsampledTraceParent(t *testing.T) {
	srv, conn, topic := pstestTopic(t)
	ids := &countingIDs{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithIDGenerator(ids))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p, err := New(conn, topic, Config{TracerProvider: tp, MaxMessages: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var rs []*Result
	for range n {
		rs = append(rs, p.Publish(context.Background(), &Message{Data: []byte("x")}))
	}
	for _, r := range rs {
		mustGet(t, r)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range n {
		tid, sid := ids.ids(i + 1)
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
		c := carrier.Carrier{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
		want[c[carrier.TraceParentKey]] = true
	}
	parentBased := sdktrace.ParentBased(sdktrace.AlwaysSample())
	msgs := srv.Messages()
	if len(msgs) != n {
		t.Fatalf("%d messages on the server, want %d", len(msgs), n)
	}
	for _, m := range msgs {
		tp := m.Attributes[carrier.TraceParentKey]
		if !want[tp] {
			t.Errorf("traceparent %q, want one of %v", tp, want)
		}
		delete(want, tp)
		ctx := propagation.TraceContext{}.Extract(context.Background(), carrier.Carrier(m.Attributes))
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() || !sc.IsRemote() || sc.IsSampled() {
			t.Errorf("subscriber extracts %+v, want a valid, remote, unsampled parent", sc)
		}
		r := parentBased.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: sc.TraceID(), Name: "s subscribe"})
		if r.Decision != sdktrace.Drop {
			t.Errorf("a ParentBased subscriber decides %v, want Drop", r.Decision)
		}
	}
}

// countingIDs is an IDGenerator of predictable ids: the i-th root span
// (from 1) gets ids(i).
type countingIDs struct {
	mu sync.Mutex
	n  int
}

func (g *countingIDs) ids(i int) (trace.TraceID, trace.SpanID) {
	tid := trace.TraceID{0xa0, 15: byte(i)}
	sid := trace.SpanID{0xb0, 7: byte(i)}
	return tid, sid
}

func (g *countingIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	return g.ids(g.n)
}

func (g *countingIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	_, sid := g.ids(g.n)
	return sid
}

// everyOtherCreate samples every other "create" span (in Start order) and
// every other span.
type everyOtherCreate struct {
	mu sync.Mutex
	n  int
}

func (s *everyOtherCreate) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	decision := sdktrace.RecordAndSample
	if strings.HasSuffix(p.Name, " create") {
		s.mu.Lock()
		s.n++
		if s.n%2 == 0 {
			decision = sdktrace.Drop
		}
		s.mu.Unlock()
	}
	return sdktrace.SamplingResult{Decision: decision, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

func (s *everyOtherCreate) Description() string { return "every other create" }

// TestTraceMixedBatch: in a batch of recorded and unrecorded messages, the
// publish span links the recorded ones, counts every message, and each
// recorded create span gets its own message's id.
func TestTraceMixedBatch(t *testing.T) {
	srv, conn, topic := pstestTopic(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(&everyOtherCreate{}), sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p, err := New(conn, topic, Config{TracerProvider: tp, MaxMessages: 4, Delay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var rs []*Result
	for i := range 4 {
		rs = append(rs, p.Publish(context.Background(), msg(i)))
	}
	ids := map[string]string{} // message id → data
	for i, r := range rs {
		ids[mustGet(t, r)] = string(msg(i).Data)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	creates := spansNamed(exp, "topic create")
	if len(creates) != 2 {
		t.Fatalf("%d create spans recorded, want 2", len(creates))
	}
	// The server's copy of each message names its create span.
	bySpan := map[string]string{} // span id → data
	for _, m := range srv.Messages() {
		tp := m.Attributes["googclient_traceparent"]
		bySpan[tp[36:52]] = string(m.Data)
	}
	for _, s := range creates {
		var id string
		for _, kv := range s.Attributes {
			if kv.Key == semconv.MessagingMessageIDKey {
				id = kv.Value.AsString()
			}
		}
		if data := bySpan[s.SpanContext.SpanID().String()]; data == "" || ids[id] != data {
			t.Errorf("create span %s has message id %q (%q), but carried message %q", s.SpanContext.SpanID(), id, ids[id], data)
		}
	}
	pubs := spansNamed(exp, "topic publish")
	if len(pubs) != 1 || len(pubs[0].Links) != 2 {
		t.Fatalf("publish spans %d (links %v), want one linking 2 messages", len(pubs), pubs)
	}
	for _, kv := range pubs[0].Attributes {
		if kv.Key == semconv.MessagingBatchMessageCountKey && kv.Value.AsInt64() != 4 {
			t.Errorf("publish span counts %d messages, want 4", kv.Value.AsInt64())
		}
	}
}

// TestTraceContextReplacesCallers: a googclient_traceparent the caller
// set itself is replaced on the wire by the create span's, as an
// injection into a copy of the attributes did, and the caller's map keeps
// its own.
func TestTraceContextReplacesCallers(t *testing.T) {
	srv, conn, topic := pstestTopic(t)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p, err := New(conn, topic, Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	const stale = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	attrs := map[string]string{"googclient_traceparent": stale}
	mustGet(t, p.Publish(context.Background(), &Message{Data: []byte("x"), Attributes: attrs}))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if attrs["googclient_traceparent"] != stale {
		t.Fatalf("the caller's attributes were modified: %v", attrs)
	}
	got := srv.Messages()[0].Attributes
	if tp := got["googclient_traceparent"]; tp == stale || len(tp) != 55 || len(got) != 1 {
		t.Fatalf("server got attributes %v, want one traceparent, not the caller's", got)
	}
}
