package pubsubflow

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// telemetry reports a Subscriber's Stats as OpenTelemetry metrics, read
// from one Stats snapshot per collection, plus the receipt→ack latency
// histogram. Without a MeterProvider it costs nothing.
type telemetry struct {
	attrs      metric.MeasurementOption
	ackLatency metric.Float64Histogram // nil without a MeterProvider
	reg        metric.Registration
}

// instruments are the observed metrics, each named
// pubsubflow.subscriber.<name>: the totals as counters, the state as gauges.
var instruments = []struct {
	name, desc string
	gauge      bool
	value      func(Stats) int64
}{
	{"received", "messages received", false, func(s Stats) int64 { return int64(s.Received) }},
	{"acked", "messages acked", false, func(s Stats) int64 { return int64(s.Acked) }},
	{"nacked", "messages nacked", false, func(s Stats) int64 { return int64(s.Nacked) }},
	{"extended", "lease extensions the server accepted", false, func(s Stats) int64 { return int64(s.Extended) }},
	{"expired", "messages whose lease ended without a confirmed extension", false, func(s Stats) int64 { return int64(s.Expired) }},
	{"reconnects", "stream reconnects", false, func(s Stats) int64 { return int64(s.Reconnects) }},
	{"outstanding", "messages holding a flow-control permit", true, func(s Stats) int64 { return s.Outstanding }},
	{"buffered", "received, not yet processing", true, func(s Stats) int64 { return s.Buffered }},
	{"processing", "handed to processing, not settled", true, func(s Stats) int64 { return s.Processing }},
}

func newTelemetry(sub string, mp metric.MeterProvider, stats func() Stats) (*telemetry, error) {
	t := &telemetry{attrs: metric.WithAttributes(attribute.String("subscription", sub))}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/pubsubflow/pubsubflow")
	obs := make([]metric.Observable, len(instruments))
	var err error
	for i, in := range instruments {
		name, desc := "pubsubflow.subscriber."+in.name, metric.WithDescription(in.desc)
		if in.gauge {
			obs[i], err = m.Int64ObservableGauge(name, desc)
		} else {
			obs[i], err = m.Int64ObservableCounter(name, desc)
		}
		if err != nil {
			return nil, err
		}
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
		for i, in := range instruments {
			o.ObserveInt64(obs[i].(metric.Int64Observable), in.value(s), t.attrs)
		}
		return nil
	}, obs...)
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

func (t *telemetry) observeAck(d time.Duration) {
	if t.ackLatency != nil {
		t.ackLatency.Record(context.Background(), d.Seconds(), t.attrs)
	}
}
