// Package tracing holds what pubsubflow's tracers share: the names and
// attributes Google's clients write, so one trace view reads the same
// whichever client handled a message, and the RPC span that settles or
// extends a batch of messages, linked both ways to their subscribe spans.
// The source traces receipt, settling and acks; the lease extender its
// modacks; the Subscriber the process span around a handler.
package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation name of pubsubflow's tracers.
const TracerName = "github.com/pubsubflow/pubsubflow"

// Attribute keys and result values as Google's clients write them.
const (
	AttrProjectID     = attribute.Key("gcp.project_id")
	AttrResourceName  = attribute.Key("gcp.resource.name")
	AttrExactlyOnce   = attribute.Key("messaging.gcp_pubsub.exactly_once_delivery")
	AttrResult        = attribute.Key("messaging.gcp_pubsub.result")
	AttrReceiptModack = attribute.Key("messaging.gcp_pubsub.is_receipt_modack")

	ResultAcked   = "acked"
	ResultNacked  = "nacked"
	ResultExpired = "expired"
	ResultNoOp    = "no-op"
)

// Names is one subscription's tracer, span-name prefix and the
// attributes every span of it carries.
type Names struct {
	Tracer trace.Tracer
	Prefix string // "<subscription id> "
	Common []attribute.KeyValue
}

// For returns the Names of subscription's spans from tp.
func For(tp trace.TracerProvider, subscription string) Names {
	project, id := SplitResource(subscription)
	return Names{
		Tracer: tp.Tracer(TracerName),
		Prefix: id + " ",
		Common: []attribute.KeyValue{
			AttrProjectID.String(project),
			AttrResourceName.String(subscription),
			semconv.MessagingSystemGCPPubsub,
			semconv.MessagingDestinationName(id),
		},
	}
}

// SplitResource splits "projects/P/<kind>/ID" into P and ID.
func SplitResource(name string) (project, id string) {
	parts := strings.Split(name, "/")
	if len(parts) == 4 {
		return parts[1], parts[3]
	}
	return "", name
}

// MessageAttrs are the per-message attributes of subscribe and process
// spans, the common ones included.
func (n Names) MessageAttrs(id string, size int, orderingKey string, attempt int) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(n.Common)+9)
	attrs = append(attrs, n.Common...)
	attrs = append(attrs, semconv.MessagingMessageID(id), semconv.MessagingMessageBodySize(size))
	if orderingKey != "" {
		attrs = append(attrs, semconv.MessagingGCPPubsubMessageOrderingKey(orderingKey))
	}
	if attempt > 0 {
		attrs = append(attrs, semconv.MessagingGCPPubsubMessageDeliveryAttempt(attempt))
	}
	return attrs
}

// RPCSpan starts the span of one RPC over n messages, linked both ways
// to the subscribe spans given (nil entries, or a nil slice: not sampled,
// nothing is done for them); each gets an "<op> start" event.
func (n Names) RPCSpan(op string, seconds int32, subscribe []trace.Span, count int, extra ...attribute.KeyValue) trace.Span {
	var links []trace.Link
	var startEvent []trace.EventOption
	for _, s := range subscribe {
		if s == nil {
			continue
		}
		if startEvent == nil {
			startEvent = []trace.EventOption{trace.WithAttributes(semconv.MessagingBatchMessageCount(count))}
			links = make([]trace.Link, 0, len(subscribe))
		}
		s.AddEvent(op+" start", startEvent...)
		if s.SpanContext().IsSampled() {
			links = append(links, trace.Link{SpanContext: s.SpanContext()})
		}
	}
	attrs := append(append(make([]attribute.KeyValue, 0, len(n.Common)+3+len(extra)), n.Common...),
		semconv.MessagingBatchMessageCount(count),
		semconv.MessagingOperationTypeSettle)
	if op != "ack" {
		attrs = append(attrs, semconv.MessagingGCPPubsubMessageAckDeadline(int(seconds)))
	}
	attrs = append(attrs, extra...)
	_, span := n.Tracer.Start(context.Background(), n.Prefix+op,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	if span.SpanContext().IsSampled() {
		back := trace.Link{SpanContext: span.SpanContext(), Attributes: []attribute.KeyValue{semconv.MessagingOperationName(op)}}
		for _, s := range subscribe {
			if s != nil {
				s.AddLink(back)
			}
		}
	}
	return span
}

// Fail records err on span as its error status.
func Fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
