package pubsubflow

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// telemetry reports a Subscriber's Stats as OpenTelemetry metrics: the
// totals as observable counters and the state as gauges, read from one
// Stats snapshot per collection, plus the receipt→ack latency histogram.
// Without a MeterProvider it costs nothing.
type telemetry struct {
	attrs      metric.MeasurementOption
	ackLatency metric.Float64Histogram // nil without a MeterProvider
	reg        metric.Registration
}

func newTelemetry(sub string, mp metric.MeterProvider, stats func() Stats) (*telemetry, error) {
	t := &telemetry{attrs: metric.WithAttributes(attribute.String("subscription", sub))}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/pubsubflow/pubsubflow")
	var err error
	counter := func(name, desc string) metric.Int64ObservableCounter {
		if err != nil {
			return nil
		}
		var c metric.Int64ObservableCounter
		c, err = m.Int64ObservableCounter(name, metric.WithDescription(desc))
		return c
	}
	gauge := func(name, desc string) metric.Int64ObservableGauge {
		if err != nil {
			return nil
		}
		var g metric.Int64ObservableGauge
		g, err = m.Int64ObservableGauge(name, metric.WithDescription(desc))
		return g
	}
	received := counter("pubsubflow.subscriber.received", "messages received")
	acked := counter("pubsubflow.subscriber.acked", "messages acked")
	nacked := counter("pubsubflow.subscriber.nacked", "messages nacked")
	extended := counter("pubsubflow.subscriber.extended", "lease extensions the server accepted")
	expired := counter("pubsubflow.subscriber.expired", "messages whose lease ended without a confirmed extension")
	reconnects := counter("pubsubflow.subscriber.reconnects", "stream reconnects")
	outstanding := gauge("pubsubflow.subscriber.outstanding", "messages holding a flow-control permit")
	buffered := gauge("pubsubflow.subscriber.buffered", "received, not yet processing")
	processing := gauge("pubsubflow.subscriber.processing", "handed to processing, not settled")
	if err != nil {
		return nil, err
	}
	if _, real := mp.(noop.MeterProvider); !real {
		t.ackLatency, err = m.Float64Histogram("pubsubflow.subscriber.ack_latency",
			metric.WithDescription("receipt to ack"), metric.WithUnit("s"))
		if err != nil {
			return nil, err
		}
	}
	t.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		o.ObserveInt64(received, int64(s.Received), t.attrs)
		o.ObserveInt64(acked, int64(s.Acked), t.attrs)
		o.ObserveInt64(nacked, int64(s.Nacked), t.attrs)
		o.ObserveInt64(extended, int64(s.Extended), t.attrs)
		o.ObserveInt64(expired, int64(s.Expired), t.attrs)
		o.ObserveInt64(reconnects, int64(s.Reconnects), t.attrs)
		o.ObserveInt64(outstanding, s.Outstanding, t.attrs)
		o.ObserveInt64(buffered, s.Buffered, t.attrs)
		o.ObserveInt64(processing, s.Processing, t.attrs)
		return nil
	}, received, acked, nacked, extended, expired, reconnects, outstanding, buffered, processing)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (t *telemetry) close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// observeAck records a message's receipt→ack latency.
func (t *telemetry) observeAck(d time.Duration) {
	if t.ackLatency != nil {
		t.ackLatency.Record(context.Background(), d.Seconds(), t.attrs)
	}
}
