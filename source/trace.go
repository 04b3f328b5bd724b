package source

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/carrier"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/internal/tracing"
)

// tracer is a source's tracing (Config.TracerProvider): each message's
// "<subscription> subscribe" span, open from receipt until the server took
// its ack or nack (or it expired, or was released with NoOp), a child of
// the trace context its publisher put in its attributes; and the "ack",
// "nack" and "modack" RPC spans of the acknowledger, linked both ways to
// the messages they settle. A source without a TracerProvider holds nil,
// and every hook is behind that one nil check.
type tracer struct {
	tracing.Names
	subscribe string // the subscribe span's name

	mu   sync.Mutex
	open map[*Message]struct{} // subscribe spans not ended
}

var _ ack.Tracer = (*tracer)(nil)

func newTracer(tp trace.TracerProvider, subscription string) *tracer {
	n := tracing.For(tp, subscription)
	return &tracer{Names: n, subscribe: n.Prefix + "subscribe", open: map[*Message]struct{}{}}
}

// received starts the subscribe span of each message of a response. A
// span the sampler does not record costs its start and nothing more: its
// attributes are set only on a recording span (so a sampler sees none),
// no event is added to it, and it is not kept for Close; the trace
// context is read from the attributes only when they carry one. The
// messages' Trace records come in one slab per response.
func (t *tracer) received(ms []*Message) {
	traces := make([]message.Trace, len(ms))
	for i, m := range ms {
		ctx := context.Background()
		if _, ok := m.Attributes[traceparent]; ok {
			ctx = propagation.TraceContext{}.Extract(ctx, carrier.Carrier(m.Attributes))
		}
		// Internal, as Google's clients make it; the process span is the
		// consumer span.
		_, span := t.Tracer.Start(ctx, t.subscribe, subscribeStart...)
		mt := &traces[i]
		mt.Subscribe = span
		mt.Recording = span.IsRecording()
		m.st.Trace = mt
		if !mt.Recording {
			continue
		}
		span.SetAttributes(append(t.MessageAttrs(m.ID, len(m.Data), m.OrderingKey, m.DeliveryAttempt),
			tracing.AttrExactlyOnce.Bool(m.ExactlyOnce),
			semconv.MessagingGCPPubsubMessageAckID(m.AckID),
			semconv.MessagingBatchMessageCount(len(ms)),
			semconv.MessagingOperationTypeReceive,
		)...)
		t.mu.Lock()
		t.open[m] = struct{}{}
		t.mu.Unlock()
	}
}

// subscribeStart are the start options of every subscribe span, made
// once (an option built per span would be an allocation per message).
var subscribeStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

// traceparent is the attribute that carries a message's W3C trace
// context, if it has one.
const traceparent = carrier.Prefix + "traceparent"

// settled records m's outcome on its subscribe span. A no-op or an
// expiry sends nothing, so it ends the span here; an ack or nack ends it
// when the server took it (StartRPC).
func (t *tracer) settled(m *Message, o uint32) {
	mt := m.st.Trace
	if mt == nil || !mt.Recording {
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
		t.end(m, tracing.AttrResult.String(tracing.ResultNoOp), nil)
	case message.Expired:
		s.AddEvent("expired")
		t.end(m, tracing.AttrResult.String(tracing.ResultExpired), errExpired)
	}
}

var (
	errExpired = errors.New("pubsubflow/source: lease ended before the message was settled (past max extension, its deadline passed unconfirmed, or its exactly-once receipt failed)")
	errClosed  = errors.New("pubsubflow/source: source closed before the server confirmed the message's outcome")
)

// end ends m's subscribe span once, with result and, if failed is set, an
// error status.
func (t *tracer) end(m *Message, result attribute.KeyValue, failed error) {
	mt := m.st.Trace
	if mt == nil || !mt.Recording || !mt.End() {
		return
	}
	t.mu.Lock()
	delete(t.open, m)
	t.mu.Unlock()
	s := mt.Subscribe
	if result.Valid() {
		s.SetAttributes(result)
	}
	switch {
	case failed != nil:
		tracing.Fail(s, failed)
	case m.ExactlyOnce:
		s.SetStatus(codes.Ok, "") // the server confirmed it
	}
	s.End()
}

// StartRPC traces one Acknowledge or ModifyAckDeadline attempt of the
// acknowledger (ack.Tracer). An ack or nack the server took ends the
// subscribe spans it settles.
func (t *tracer) StartRPC(op string, seconds int32, _ []string, tags []ack.Tag) func(ack.Attempt) {
	var ms []*Message
	var spans []trace.Span
	for i, tag := range tags {
		if at, ok := tag.(*ackTag); ok {
			m := (*Message)(at)
			if mt := m.st.Trace; mt != nil && mt.Recording && !mt.Ended() {
				if ms == nil {
					ms = make([]*Message, len(tags))
					spans = make([]trace.Span, len(tags))
				}
				ms[i], spans[i] = m, mt.Subscribe
			}
		}
	}
	span := t.RPCSpan(op, seconds, spans, len(tags))
	return func(at ack.Attempt) {
		if at.Err != nil {
			tracing.Fail(span, at.Err)
		}
		span.End()
		if ms == nil {
			return // none of its messages is sampled
		}
		state := make([]uint8, len(ms)) // 0 confirmed, 1 failed, 2 retried
		for _, i := range at.Failed {
			state[i] = 1
		}
		for _, i := range at.Retry {
			state[i] = 2
		}
		result := tracing.AttrResult.String(tracing.ResultAcked)
		if op != "ack" {
			result = tracing.AttrResult.String(tracing.ResultNacked)
		}
		for i, m := range ms {
			if m == nil {
				continue
			}
			m.st.Trace.Subscribe.AddEvent(op + " end")
			switch state[i] {
			case 0:
				t.end(m, result, nil)
			case 1:
				t.end(m, attribute.KeyValue{}, at.Err)
			}
		}
	}
}

// close ends every subscribe span still open when the source has closed:
// the acks and nacks the server never confirmed.
func (t *tracer) close() {
	t.mu.Lock()
	left := make([]*Message, 0, len(t.open))
	for m := range t.open {
		left = append(left, m)
	}
	t.mu.Unlock()
	for _, m := range left {
		t.end(m, attribute.KeyValue{}, errClosed)
	}
}
