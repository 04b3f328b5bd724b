package message

import (
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// Trace is the span state of a received message whose subscriber traces
// (SubscriberConfig.TracerProvider); a subscriber that does not trace
// never makes one, so its messages carry a nil pointer and nothing else.
type Trace struct {
	// Subscribe is the message's "<subscription> subscribe" span: a child
	// of the trace context its publisher put in its attributes, open from
	// receipt until the server confirmed its ack or nack, or it expired.
	Subscribe trace.Span
	// Process is the "<subscription> process" span around its handler
	// while the handler runs (nil before and after).
	Process atomic.Pointer[trace.Span]
	// Recording is whether Subscribe records (its trace was sampled),
	// set before the message is shared. A message whose subscribe span
	// does not record gets no other span and no event: its trace context
	// still reaches its handler, and nothing else is done for it.
	Recording bool

	ended atomic.Bool
}

// End reports whether this call is the first to end the message's
// subscribe span (the settle path, the RPC that confirms it and the
// subscriber's Close may race to end it; only one may).
func (t *Trace) End() bool { return t.ended.CompareAndSwap(false, true) }

// Ended reports whether End was called.
func (t *Trace) Ended() bool { return t.ended.Load() }
