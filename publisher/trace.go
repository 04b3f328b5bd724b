package publisher

import (
	"context"
	"maps"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/carrier"
)

// tracerName is the instrumentation name of the Publisher's tracer.
const tracerName = "github.com/pubsubflow/pubsubflow/publisher"

// pubTracer is a Publisher's tracing; the Publisher holds nil when
// Config.TracerProvider is unset.
type pubTracer struct {
	tr     trace.Tracer
	prefix string // "<topic id> "
	common []attribute.KeyValue
}

func newPubTracer(tp trace.TracerProvider, topic string) *pubTracer {
	parts := strings.Split(topic, "/") // checked: projects/P/topics/T
	return &pubTracer{
		tr:     tp.Tracer(tracerName),
		prefix: parts[3] + " ",
		common: []attribute.KeyValue{
			attribute.String("gcp.project_id", parts[1]),
			attribute.String("gcp.resource.name", topic),
			semconv.MessagingSystemGCPPubsub,
			semconv.MessagingDestinationName(parts[3]),
		},
	}
}

// tracedMsg is the span state of one message being published, when
// tracing: its create span, and the flow-control and batching spans
// under it.
type tracedMsg struct {
	create, flow, batching trace.Span
	t                      *pubTracer
}

// inject returns m with the create span's context in a copy of its
// attributes, when that context is valid (else m). Publish calls it after
// checking the message against the service's limits: the googclient_ keys
// are the client's own, not the caller's.
func (tm *tracedMsg) inject(ctx context.Context, m *Message) *Message {
	if !tm.create.SpanContext().IsValid() {
		return m
	}
	mc := *m
	mc.Attributes = maps.Clone(m.Attributes)
	if mc.Attributes == nil {
		mc.Attributes = make(map[string]string, 1)
	}
	propagation.TraceContext{}.Inject(ctx, carrier.Carrier(mc.Attributes))
	return &mc
}

// flowControl starts the span of the wait for flow control.
func (tm *tracedMsg) flowControl(ctx context.Context) {
	_, tm.flow = tm.t.tr.Start(ctx, "publisher flow control")
}

// admitted ends the flow-control span and, when the message was admitted,
// starts its batching span (ended when its batch is sent).
func (tm *tracedMsg) admitted(ctx context.Context, err error) {
	if err != nil {
		tm.flow.RecordError(err)
		tm.flow.SetStatus(codes.Error, err.Error())
	}
	tm.flow.End()
	if err == nil {
		_, tm.batching = tm.t.tr.Start(ctx, "publisher batching")
	}
}

// publishTraced is Publish with a "<topic> create" span for the message,
// whose context travels in a copy of its attributes when it is valid (the
// caller's m is not modified; see inject). The span ends when the message's batch
// settles, or at once if Publish refuses the message.
func (p *Publisher) publishTraced(ctx context.Context, m *Message) *Result {
	if m == nil {
		return p.add(ctx, m, nil)
	}
	t := p.tracing
	attrs := make([]attribute.KeyValue, 0, len(t.common)+4)
	attrs = append(attrs, t.common...)
	attrs = append(attrs,
		semconv.MessagingMessageBodySize(len(m.Data)),
		semconv.MessagingOperationTypeCreate)
	if m.OrderingKey != "" {
		attrs = append(attrs, semconv.MessagingGCPPubsubMessageOrderingKey(m.OrderingKey))
	}
	ctx, span := t.tr.Start(ctx, t.prefix+"create",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	tm := &tracedMsg{create: span, t: t}
	r := p.add(ctx, m, tm)
	if r.err != nil {
		if tm.batching != nil {
			tm.batching.End()
		}
		span.RecordError(r.err)
		span.SetStatus(codes.Error, r.err.Error())
		span.End()
	}
	return r
}

// startPublish starts the "<topic> publish" span of a batch, linked both
// ways to its messages' create spans, and ends their batching spans.
func (t *pubTracer) startPublish(b *batch) trace.Span {
	links := make([]trace.Link, 0, len(b.spans))
	for _, tm := range b.spans {
		tm.batching.End()
		if sc := tm.create.SpanContext(); sc.IsSampled() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	attrs := append(append([]attribute.KeyValue{}, t.common...),
		semconv.MessagingBatchMessageCount(len(b.spans)),
		semconv.MessagingOperationTypePublish)
	_, span := t.tr.Start(context.Background(), t.prefix+"publish",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	sampled := span.SpanContext().IsSampled()
	back := trace.Link{SpanContext: span.SpanContext(), Attributes: []attribute.KeyValue{semconv.MessagingOperationName("publish")}}
	for _, tm := range b.spans {
		if sampled {
			tm.create.AddLink(back)
		}
		tm.create.AddEvent("publish start", trace.WithAttributes(semconv.MessagingBatchMessageCount(len(b.spans))))
	}
	return span
}

// endPublish ends a batch's publish span and settles its create spans.
func (t *pubTracer) endPublish(span trace.Span, b *batch, ids []string, msgErrs []error, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	endCreates(b, ids, msgErrs, err)
}

// endCreates ends the spans of b's messages: create spans with their
// ids, or with err, or with their own error in msgErrs (a batch that was
// never sent also ends its batching spans).
func endCreates(b *batch, ids []string, msgErrs []error, err error) {
	for i, tm := range b.spans {
		tm.batching.End() // no-op when startPublish ended it
		s := tm.create
		s.AddEvent("publish end")
		merr := err
		if merr == nil && i < len(msgErrs) {
			merr = msgErrs[i]
		}
		if merr != nil {
			s.RecordError(merr)
			s.SetStatus(codes.Error, merr.Error())
		} else if i < len(ids) {
			s.SetAttributes(semconv.MessagingMessageID(ids[i]))
		}
		s.End()
	}
	b.spans = nil
}
