package flow

import (
	"sync"

	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

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

// startTrace starts the tracing of one attempt of j (nil when not traced).
func (e *Extender) startTrace(j job) func(error) {
	t := e.tracer
	if t == nil {
		return nil
	}
	var spans []trace.Span // nil unless a message of j is sampled
	for i, l := range j.leases {
		if mt := message.Of(l.m).Trace; mt != nil && mt.Recording {
			if spans == nil {
				spans = make([]trace.Span, len(j.leases))
			}
			spans[i] = mt.Subscribe
		}
	}
	span := t.namesFor(j.sub).RPCSpan("modack", j.secs, spans, len(j.leases), tracing.AttrReceiptModack.Bool(j.receipt))
	return func(err error) {
		event := "lease extended"
		if j.receipt {
			event = "receipt modack"
		}
		var ended []trace.EventOption
		if err == nil && spans != nil {
			ended = []trace.EventOption{trace.WithAttributes(semconv.MessagingGCPPubsubMessageAckDeadline(int(j.secs)))}
		}
		for _, s := range spans {
			if s == nil {
				continue
			}
			s.AddEvent("modack end")
			if err == nil {
				s.AddEvent(event, ended...)
			}
		}
		if err != nil {
			tracing.Fail(span, err)
		}
		span.End()
	}
}
