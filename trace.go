package pubsubflow

import (
	"context"
	"errors"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/carrier"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

// TracerName is the instrumentation name of pubsubflow's tracers.
const TracerName = "github.com/pubsubflow/pubsubflow"

// Attribute keys and event names as Google's clients write them, so one
// trace view reads the same whichever client handled a message.
const (
	attrProjectID     = attribute.Key("gcp.project_id")
	attrResourceName  = attribute.Key("gcp.resource.name")
	attrExactlyOnce   = attribute.Key("messaging.gcp_pubsub.exactly_once_delivery")
	attrResult        = attribute.Key("messaging.gcp_pubsub.result")
	attrReceiptModack = attribute.Key("messaging.gcp_pubsub.is_receipt_modack")

	resultAcked   = "acked"
	resultNacked  = "nacked"
	resultExpired = "expired"
	resultNoOp    = "no-op"
)

// MessageCarrier carries the W3C trace context in a Pub/Sub message's
// attributes under the "googclient_" prefix Google's clients use
// ("googclient_traceparent", …), so a trace crosses between them and
// pubsubflow in both directions. Use it with propagation.TraceContext to
// read the publisher's context from a message yourself.
type MessageCarrier = carrier.Carrier

// subTracer is a Subscriber's tracing; the Subscriber holds nil when
// SubscriberConfig.TracerProvider is unset, and every hook is behind that
// one nil check.
type subTracer struct {
	tr     trace.Tracer
	prefix string               // "<subscription id> "
	common []attribute.KeyValue // on every span

	mu      sync.Mutex
	open    map[string]*Message   // by ack id: subscribe spans not ended
	running map[*Message]struct{} // process spans not ended
}

func newSubTracer(tp trace.TracerProvider, subscription string) *subTracer {
	project, id := splitResource(subscription)
	return &subTracer{
		tr:     tp.Tracer(TracerName),
		prefix: id + " ",
		common: []attribute.KeyValue{
			attrProjectID.String(project),
			attrResourceName.String(subscription),
			semconv.MessagingSystemGCPPubsub,
			semconv.MessagingDestinationName(id),
		},
		open:    map[string]*Message{},
		running: map[*Message]struct{}{},
	}
}

// splitResource splits "projects/P/<kind>/ID" into P and ID.
func splitResource(name string) (project, id string) {
	parts := strings.Split(name, "/")
	if len(parts) == 4 {
		return parts[1], parts[3]
	}
	return "", name
}

// received starts the subscribe span of each message of a response, as a
// child of the trace context its publisher sent along.
func (t *subTracer) received(ms []*Message) {
	for _, m := range ms {
		ctx := context.Background()
		if len(m.Attributes) > 0 {
			ctx = propagation.TraceContext{}.Extract(ctx, MessageCarrier(m.Attributes))
		}
		attrs := append(t.messageAttrs(m),
			attrExactlyOnce.Bool(m.ExactlyOnce),
			semconv.MessagingGCPPubsubMessageAckID(m.AckID),
			semconv.MessagingBatchMessageCount(len(ms)),
			semconv.MessagingOperationTypeReceive,
		)
		// Internal, as Google's clients make it; the process span is the
		// consumer span.
		_, span := t.tr.Start(ctx, t.prefix+"subscribe",
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
		message.SetTrace(m, &message.Trace{Subscribe: span})
		t.mu.Lock()
		t.open[m.AckID] = m
		t.mu.Unlock()
	}
}

// messageAttrs are the per-message attributes of subscribe and process
// spans, the common ones included.
func (t *subTracer) messageAttrs(m *Message) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(t.common)+9)
	attrs = append(attrs, t.common...)
	attrs = append(attrs,
		semconv.MessagingMessageID(m.ID),
		semconv.MessagingMessageBodySize(len(m.Data)),
	)
	if m.OrderingKey != "" {
		attrs = append(attrs, semconv.MessagingGCPPubsubMessageOrderingKey(m.OrderingKey))
	}
	if m.DeliveryAttempt > 0 {
		attrs = append(attrs, semconv.MessagingGCPPubsubMessageDeliveryAttempt(m.DeliveryAttempt))
	}
	return attrs
}

// startProcess starts the process span of m around its handler: a child
// of its subscribe span, carried by the handler's ctx.
func (t *subTracer) startProcess(ctx context.Context, m *Message) (context.Context, trace.Span) {
	mt := message.TraceOf(m)
	if mt == nil {
		return ctx, nil
	}
	ctx, span := t.tr.Start(trace.ContextWithSpan(ctx, mt.Subscribe), t.prefix+"process",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(append(t.messageAttrs(m), semconv.MessagingOperationTypeDeliver)...))
	mt.Process.Store(&span)
	t.mu.Lock()
	t.running[m] = struct{}{}
	t.mu.Unlock()
	return ctx, span
}

// endProcess ends m's process span when its handler returned err.
func (t *subTracer) endProcess(m *Message, span trace.Span, err error) {
	if span == nil || message.TraceOf(m).Process.Swap(nil) == nil {
		return // not traced, or Close ended it
	}
	t.mu.Lock()
	delete(t.running, m)
	t.mu.Unlock()
	switch m.Outcome() {
	case message.Ack:
		span.AddEvent("ack called")
	case message.Nack, message.NackAfter:
		span.AddEvent("nack called")
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// settled records m's outcome on its subscribe span. A no-op or an
// expiry sends nothing, so it ends the span here; an ack or nack ends it
// when the server took it (StartRPC).
func (t *subTracer) settled(m *Message, o Outcome) {
	mt := message.TraceOf(m)
	if mt == nil {
		return
	}
	s := mt.Subscribe
	switch o {
	case message.Ack:
		s.AddEvent("ack called")
	case message.Nack, message.NackAfter:
		s.AddEvent("nack called")
	case message.NoOp:
		s.AddEvent("no-op called")
		t.end(m, attrResult.String(resultNoOp), nil)
	case message.Expired:
		s.AddEvent("expired")
		t.end(m, attrResult.String(resultExpired), errExpired)
	}
}

var (
	errExpired   = errors.New("pubsubflow: lease dropped before the message was settled (past max extension, or its exactly-once receipt failed)")
	errClosed    = errors.New("pubsubflow: subscriber closed before the server confirmed the message's outcome")
	errAbandoned = errors.New("pubsubflow: subscriber closed while the handler still ran (past the drain timeout)")
)

// end ends m's subscribe span once, with result and, if failed is set, an
// error status.
func (t *subTracer) end(m *Message, result attribute.KeyValue, failed error) {
	mt := message.TraceOf(m)
	if mt == nil || !mt.End() {
		return
	}
	t.mu.Lock()
	if t.open[m.AckID] == m {
		delete(t.open, m.AckID)
	}
	t.mu.Unlock()
	s := mt.Subscribe
	if result.Valid() {
		s.SetAttributes(result)
	}
	switch {
	case failed != nil:
		s.RecordError(failed)
		s.SetStatus(codes.Error, failed.Error())
	case m.ExactlyOnce:
		s.SetStatus(codes.Ok, "") // the server confirmed it
	}
	s.End()
}

// lookup returns the messages of ackIDs whose subscribe span is open (nil
// where there is none).
func (t *subTracer) lookup(ackIDs []string) []*Message {
	ms := make([]*Message, len(ackIDs))
	t.mu.Lock()
	for i, id := range ackIDs {
		ms[i] = t.open[id]
	}
	t.mu.Unlock()
	return ms
}

// rpcSpan starts the span of one RPC over ms, linked both ways to their
// subscribe spans, each of which gets an "<op> start" event.
func (t *subTracer) rpcSpan(op string, seconds int32, ms []*Message, extra ...attribute.KeyValue) trace.Span {
	links := make([]trace.Link, 0, len(ms))
	for _, m := range ms {
		if m == nil || message.TraceOf(m) == nil {
			continue
		}
		s := message.TraceOf(m).Subscribe
		s.AddEvent(op+" start", trace.WithAttributes(semconv.MessagingBatchMessageCount(len(ms))))
		if s.SpanContext().IsSampled() {
			links = append(links, trace.Link{SpanContext: s.SpanContext()})
		}
	}
	attrs := append(append([]attribute.KeyValue{}, t.common...),
		semconv.MessagingBatchMessageCount(len(ms)),
		semconv.MessagingOperationTypeSettle)
	if op != "ack" {
		attrs = append(attrs, semconv.MessagingGCPPubsubMessageAckDeadline(int(seconds)))
	}
	attrs = append(attrs, extra...)
	_, span := t.tr.Start(context.Background(), t.prefix+op,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	if span.SpanContext().IsSampled() {
		back := trace.Link{SpanContext: span.SpanContext(), Attributes: []attribute.KeyValue{semconv.MessagingOperationName(op)}}
		for _, m := range ms {
			if m != nil && message.TraceOf(m) != nil {
				message.TraceOf(m).Subscribe.AddLink(back)
			}
		}
	}
	return span
}

// StartRPC traces one Acknowledge or ModifyAckDeadline attempt of the
// acknowledger (ack.Tracer). An ack or nack the server took ends the
// subscribe spans it settles.
func (t *subTracer) StartRPC(op string, seconds int32, ackIDs []string) func(ack.Attempt) {
	ms := t.lookup(ackIDs)
	span := t.rpcSpan(op, seconds, ms)
	return func(at ack.Attempt) {
		if at.Err != nil {
			span.RecordError(at.Err)
			span.SetStatus(codes.Error, at.Err.Error())
		}
		span.End()
		state := make([]uint8, len(ms)) // 0 confirmed, 1 failed, 2 retried
		for _, i := range at.Failed {
			state[i] = 1
		}
		for _, i := range at.Retry {
			state[i] = 2
		}
		result := attrResult.String(resultAcked)
		if op != "ack" {
			result = attrResult.String(resultNacked)
		}
		for i, m := range ms {
			if m == nil || message.TraceOf(m) == nil {
				continue
			}
			message.TraceOf(m).Subscribe.AddEvent(op + " end")
			if op == "modack" {
				continue // an extension settles nothing
			}
			switch state[i] {
			case 0:
				t.end(m, result, nil)
			case 1:
				t.end(m, attribute.KeyValue{}, at.Err)
			}
		}
	}
}

// StartModack traces one ModifyAckDeadline attempt of the lease manager
// (flow.Tracer): the receipt modack or a lease extension.
func (t *subTracer) StartModack(receipt bool, seconds int32, ms []*message.Message) func(error) {
	span := t.rpcSpan("modack", seconds, ms, attrReceiptModack.Bool(receipt))
	return func(err error) {
		event := "lease extended"
		if receipt {
			event = "receipt modack"
		}
		for _, m := range ms {
			if mt := message.TraceOf(m); mt != nil {
				mt.Subscribe.AddEvent("modack end")
				if err == nil {
					mt.Subscribe.AddEvent(event, trace.WithAttributes(semconv.MessagingGCPPubsubMessageAckDeadline(int(seconds))))
				}
			}
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// close ends every span still open when the subscriber has closed: the
// acks and nacks the server never confirmed, and the process spans of
// handlers abandoned past the drain timeout.
func (t *subTracer) close() {
	t.mu.Lock()
	left := make([]*Message, 0, len(t.open))
	for _, m := range t.open {
		left = append(left, m)
	}
	running := make([]*Message, 0, len(t.running))
	for m := range t.running {
		running = append(running, m)
	}
	clear(t.running)
	t.mu.Unlock()
	for _, m := range running {
		if p := message.TraceOf(m).Process.Swap(nil); p != nil {
			(*p).SetStatus(codes.Error, errAbandoned.Error())
			(*p).End()
		}
	}
	for _, m := range left {
		t.end(m, attribute.KeyValue{}, errClosed)
	}
}
