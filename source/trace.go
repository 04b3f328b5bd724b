package source

import (
	"context"
	"errors"
	"maps"
	"slices"
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
// "<subscription> subscribe" span, a child of its publisher's trace
// context, open from receipt until the server took its ack or nack (or it
// expired, or was released), and the acknowledger's RPC spans, linked
// both ways to the messages they settle. Without a TracerProvider a
// source holds nil, and every hook is behind that one check.
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
// span the sampler does not record costs its start and nothing more.
func (t *tracer) received(ms []*Message) {
	traces := make([]message.Trace, len(ms))
	for i, m := range ms {
		ctx := context.Background()
		if _, ok := m.Attributes[traceparent]; ok {
			ctx = propagation.TraceContext{}.Extract(ctx, carrier.Carrier(m.Attributes))
		}
		// Internal, as Google's clients make it: the process span is the
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

// subscribeStart is made once: an option built per span allocates.
var subscribeStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

const traceparent = carrier.Prefix + "traceparent"

// settled records m's outcome on its subscribe span, and ends it for a
// no-op or an expiry, which send nothing (StartRPC ends the others).
func (t *tracer) settled(m *Message, o Outcome) {
	mt := m.st.Trace
	if mt == nil || !mt.Recording {
		return
	}
	s := mt.Subscribe
	switch o {
	case Ack:
		s.AddEvent("ack called")
	case Nack, NackAfter:
		s.AddEvent("nack called")
	case NoOp:
		s.AddEvent("no-op called")
		t.end(m, tracing.AttrResult.String(tracing.ResultNoOp), nil)
	case Expired:
		s.AddEvent("expired")
		t.end(m, tracing.AttrResult.String(tracing.ResultExpired), errExpired)
	}
}

var (
	errExpired = errors.New("pubsubflow/source: lease ended before the message was settled (past max extension, its deadline passed unconfirmed, or its exactly-once receipt failed)")
	errClosed  = errors.New("pubsubflow/source: source closed before the server confirmed the message's outcome")
)

// end ends m's subscribe span once, with result and failed's status.
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

// StartRPC traces one Acknowledge or ModifyAckDeadline attempt
// (ack.Tracer); the subscribe spans of what the server took end with it.
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

// close ends the subscribe spans whose outcome the server never confirmed.
func (t *tracer) close() {
	t.mu.Lock()
	left := slices.Collect(maps.Keys(t.open))
	t.mu.Unlock()
	for _, m := range left {
		t.end(m, attribute.KeyValue{}, errClosed)
	}
}
