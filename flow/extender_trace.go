package flow

import (
	"sync"

	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/tracing"
)

// modackTracer traces the extender's ModifyAckDeadline attempts
// (ExtenderConfig.TracerProvider): one "modack" span per attempt, linked
// both ways to the subscribe spans of the messages it extends, which get
// "modack end" and, on success, "receipt modack" or "lease extended"
// events. Messages are traced on their own subscription.
type modackTracer struct {
	tp    trace.TracerProvider
	names sync.Map // subscription → tracing.Names
}

func (t *modackTracer) namesFor(sub string) tracing.Names {
	if n, ok := t.names.Load(sub); ok {
		return n.(tracing.Names)
	}
	n, _ := t.names.LoadOrStore(sub, tracing.For(t.tp, sub))
	return n.(tracing.Names)
}

// ackTracer is the tracer of the extender's senders (nil when not
// traced).
func (e *Extender) ackTracer() ack.Tracer {
	if e.tracer == nil {
		return nil
	}
	return e.tracer
}

// StartRPC traces one modack attempt of a sender (ack.Tracer): a
// "modack" span linked to the subscribe spans of the leases' messages.
func (t *modackTracer) StartRPC(_ string, secs int32, _ []string, tags []ack.Tag) func(ack.Attempt) {
	var spans []trace.Span // nil unless a message is sampled
	var sub string
	receipt := false
	for i, tag := range tags {
		l, ok := tag.(*lease)
		if !ok {
			continue
		}
		sub, receipt = l.m.Subscription, l.receipt
		if mt := message.Of(l.m).Trace; mt != nil && mt.Recording {
			if spans == nil {
				spans = make([]trace.Span, len(tags))
			}
			spans[i] = mt.Subscribe
		}
	}
	span := t.namesFor(sub).RPCSpan("modack", secs, spans, len(tags), tracing.AttrReceiptModack.Bool(receipt))
	return func(at ack.Attempt) {
		event := "lease extended"
		if receipt {
			event = "receipt modack"
		}
		var ended []trace.EventOption
		if at.Err == nil && spans != nil {
			ended = []trace.EventOption{trace.WithAttributes(semconv.MessagingGCPPubsubMessageAckDeadline(int(secs)))}
		}
		for _, s := range spans {
			if s == nil {
				continue
			}
			s.AddEvent("modack end")
			if at.Err == nil {
				s.AddEvent(event, ended...)
			}
		}
		if at.Err != nil {
			tracing.Fail(span, at.Err)
		}
		span.End()
	}
}
