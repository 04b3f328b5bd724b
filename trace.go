package pubsubflow

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/carrier"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/tracing"
)

// MessageCarrier carries the W3C trace context in a Pub/Sub message's
// attributes under the "googclient_" prefix Google's clients use, so a
// trace crosses between them and pubsubflow. Use it with
// propagation.TraceContext to read a message's publisher context.
type MessageCarrier map[string]string

// Get returns the value of key, read from its "googclient_" attribute.
func (c MessageCarrier) Get(key string) string { return carrier.Carrier(c).Get(key) }

// Set stores value under key's "googclient_" attribute.
func (c MessageCarrier) Set(key, value string) { carrier.Carrier(c).Set(key, value) }

// Keys lists the keys carried.
func (c MessageCarrier) Keys() []string { return carrier.Carrier(c).Keys() }

// subTracer makes the "<subscription> process" span around a handler, a
// child of the message's subscribe span (which its source keeps).
type subTracer struct {
	tracing.Names
	process string

	mu      sync.Mutex
	running map[*Message]struct{} // process spans not ended
}

func newSubTracer(tp trace.TracerProvider, subscription string) *subTracer {
	n := tracing.For(tp, subscription)
	return &subTracer{Names: n, process: n.Prefix + "process", running: map[*Message]struct{}{}}
}

var errAbandoned = errors.New("pubsubflow: subscriber closed while the handler still ran (past the drain timeout)")

// startProcess starts m's process span. A message whose subscribe span
// is not sampled gets none, but its handler's ctx still carries the
// subscribe span's context.
func (t *subTracer) startProcess(ctx context.Context, m *Message) (context.Context, trace.Span) {
	mt := message.Of(m).Trace
	if mt == nil {
		return ctx, nil
	}
	ctx = trace.ContextWithSpan(ctx, mt.Subscribe)
	if !mt.Recording {
		return ctx, nil
	}
	ctx, span := t.Tracer.Start(ctx, t.process,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(append(t.MessageAttrs(m.ID, len(m.Data), m.OrderingKey, m.DeliveryAttempt), semconv.MessagingOperationTypeDeliver)...))
	mt.Process.Store(&span)
	t.mu.Lock()
	t.running[m] = struct{}{}
	t.mu.Unlock()
	return ctx, span
}

func (t *subTracer) endProcess(m *Message, span trace.Span, err error) {
	if span == nil || message.Of(m).Trace.Process.Swap(nil) == nil {
		return // not traced, or Close ended it
	}
	t.mu.Lock()
	delete(t.running, m)
	t.mu.Unlock()
	switch m.Outcome() {
	case Ack:
		span.AddEvent("ack called")
	case Nack, NackAfter:
		span.AddEvent("nack called")
	}
	if err != nil {
		tracing.Fail(span, err)
	}
	span.End()
}

// close ends the spans of handlers abandoned past the drain timeout.
func (t *subTracer) close() {
	t.mu.Lock()
	running := slices.Collect(maps.Keys(t.running))
	clear(t.running)
	t.mu.Unlock()
	for _, m := range running {
		if p := message.Of(m).Trace.Process.Swap(nil); p != nil {
			tracing.Fail(*p, errAbandoned)
			(*p).End()
		}
	}
}
