package publisher

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation name of the Publisher's tracer.
const tracerName = "github.com/pubsubflow/pubsubflow/publisher"

// pubTracer is a Publisher's tracing; the Publisher holds nil when
// Config.TracerProvider is unset. What every span shares is built once
// here, so that a message whose span is not recorded costs one Start.
type pubTracer struct {
	tr          trace.Tracer
	createName  string // "<topic id> create"
	publishName string // "<topic id> publish"
	common      []attribute.KeyValue
	createOpts  []trace.SpanStartOption // the producer kind: no attributes (see publishTraced)
	createAttrs []attribute.KeyValue    // common attributes and the create operation
}

func newPubTracer(tp trace.TracerProvider, topic string) *pubTracer {
	parts := strings.Split(topic, "/") // checked: projects/P/topics/T
	common := []attribute.KeyValue{
		attribute.String("gcp.project_id", parts[1]),
		attribute.String("gcp.resource.name", topic),
		semconv.MessagingSystemGCPPubsub,
		semconv.MessagingDestinationName(parts[3]),
	}
	return &pubTracer{
		tr:          tp.Tracer(tracerName),
		createName:  parts[3] + " create",
		publishName: parts[3] + " publish",
		common:      common,
		createOpts:  []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)},
		createAttrs: append(common[:len(common):len(common)], semconv.MessagingOperationTypeCreate),
	}
}

// tracedMsg is the span state of one message whose create span is
// recorded: that span, and the flow-control and batching spans under it.
type tracedMsg struct {
	create, flow, batching trace.Span
	t                      *pubTracer
	i                      int // the message's index in its batch
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
// whose context travels in the message's attributes on the wire when it
// is valid (the caller's m and its map are not modified; see
// carrier.AppendWire).
//
// Tracing costs what it records: when the sampler does not record the
// create span, it ends at once and the message takes the untraced path,
// carrying only its (unsampled) trace context, so that a subscriber
// honours the decision; it gets no flow-control or batching span, and a
// batch of such messages no publish span. The create span's attributes
// are set once it is known to record (a sampler sees its name, kind and
// parent, not its attributes): given to Start, the SDK would copy them
// for every message, recorded or not. A recorded create span ends when
// the message's batch settles, or at once if Publish refuses the message.
func (p *Publisher) publishTraced(ctx context.Context, m *Message) *Result {
	if m == nil {
		return p.add(ctx, m, nil, trace.SpanContext{})
	}
	t := p.tracing
	ctx, span := t.tr.Start(ctx, t.createName, t.createOpts...)
	if !span.IsRecording() {
		span.End()
		return p.add(ctx, m, nil, span.SpanContext())
	}
	span.SetAttributes(t.createAttrs...)
	span.SetAttributes(semconv.MessagingMessageBodySize(len(m.Data)))
	if m.OrderingKey != "" {
		span.SetAttributes(semconv.MessagingGCPPubsubMessageOrderingKey(m.OrderingKey))
	}
	tm := &tracedMsg{create: span, t: t}
	r := p.add(ctx, m, tm, span.SpanContext())
	if err := r.refused(); err != nil {
		if tm.batching != nil {
			tm.batching.End()
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
	}
	return r
}

// startPublish starts the "<topic> publish" span of a batch, linked both
// ways to its recorded messages' create spans, and ends their batching
// spans. The caller calls it only for a batch with such messages.
func (t *pubTracer) startPublish(b *batch) trace.Span {
	links := make([]trace.Link, 0, len(b.spans))
	for _, tm := range b.spans {
		tm.batching.End()
		if sc := tm.create.SpanContext(); sc.IsSampled() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	n := semconv.MessagingBatchMessageCount(b.n)
	attrs := append(append(make([]attribute.KeyValue, 0, len(t.common)+2), t.common...),
		n, semconv.MessagingOperationTypePublish)
	_, span := t.tr.Start(context.Background(), t.publishName,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	sampled := span.SpanContext().IsSampled()
	back := trace.Link{SpanContext: span.SpanContext(), Attributes: []attribute.KeyValue{semconv.MessagingOperationName("publish")}}
	start := trace.WithAttributes(n)
	for _, tm := range b.spans {
		if sampled {
			tm.create.AddLink(back)
		}
		tm.create.AddEvent("publish start", start)
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

// endCreates ends the spans of b's recorded messages: create spans with
// their ids, or with err, or with their own error in msgErrs (a batch that
// was never sent also ends its batching spans).
func endCreates(b *batch, ids []string, msgErrs []error, err error) {
	for _, tm := range b.spans {
		tm.batching.End() // no-op when startPublish ended it
		s := tm.create
		s.AddEvent("publish end")
		merr := err
		if merr == nil && tm.i < len(msgErrs) {
			merr = msgErrs[tm.i]
		}
		if merr != nil {
			s.RecordError(merr)
			s.SetStatus(codes.Error, merr.Error())
		} else if tm.i < len(ids) {
			s.SetAttributes(semconv.MessagingMessageID(ids[tm.i]))
		}
		s.End()
	}
	b.spans = nil
}
