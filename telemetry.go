package pubsubflow

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

// telemetry turns stage events into Stats counters, log lines and
// OpenTelemetry metrics. Without a logger and a MeterProvider it costs the
// atomic adds of the counters and nothing else.
type telemetry struct {
	sub    string
	log    *slog.Logger
	c      *counters
	attrs  metric.MeasurementOption
	ins    instruments
	reg    metric.Registration
	hasOTe bool
}

type instruments struct {
	received, acked, nacked, extended, expired, reconnects metric.Int64Counter
	ackLatency                                             metric.Float64Histogram
}

func newTelemetry(sub string, log *slog.Logger, mp metric.MeterProvider, c *counters, stats func() Stats) (*telemetry, error) {
	t := &telemetry{sub: sub, log: log, c: c, attrs: metric.WithAttributes(attribute.String("subscription", sub))}
	if mp == nil {
		mp = noop.NewMeterProvider()
	} else {
		t.hasOTe = true
	}
	m := mp.Meter("github.com/pubsubflow/pubsubflow")
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var ctr metric.Int64Counter
		ctr, err = m.Int64Counter(name, metric.WithDescription(desc))
		return ctr
	}
	t.ins.received = counter("pubsubflow.subscriber.received", "messages received")
	t.ins.acked = counter("pubsubflow.subscriber.acked", "messages acked")
	t.ins.nacked = counter("pubsubflow.subscriber.nacked", "messages nacked")
	t.ins.extended = counter("pubsubflow.subscriber.extended", "lease extensions sent")
	t.ins.expired = counter("pubsubflow.subscriber.expired", "leases dropped past max extension")
	t.ins.reconnects = counter("pubsubflow.subscriber.reconnects", "stream reconnects")
	if err != nil {
		return nil, err
	}
	t.ins.ackLatency, err = m.Float64Histogram("pubsubflow.subscriber.ack_latency",
		metric.WithDescription("receipt to ack"), metric.WithUnit("s"))
	if err != nil {
		return nil, err
	}
	outstanding, _ := m.Int64ObservableGauge("pubsubflow.subscriber.outstanding", metric.WithDescription("messages holding a flow-control permit"))
	buffered, _ := m.Int64ObservableGauge("pubsubflow.subscriber.buffered", metric.WithDescription("received, not yet processing"))
	processing, _ := m.Int64ObservableGauge("pubsubflow.subscriber.processing", metric.WithDescription("handed to processing, not settled"))
	t.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		o.ObserveInt64(outstanding, s.Outstanding, t.attrs)
		o.ObserveInt64(buffered, s.Buffered, t.attrs)
		o.ObserveInt64(processing, s.Processing, t.attrs)
		return nil
	}, outstanding, buffered, processing)
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

// add records n on counter if OpenTelemetry is on.
func (t *telemetry) add(ctr metric.Int64Counter, n int) {
	if t.hasOTe && n > 0 {
		ctr.Add(context.Background(), int64(n), t.attrs)
	}
}

// ackLatency records a message's receipt→ack latency.
func (t *telemetry) ackLatency(d time.Duration) {
	if t.hasOTe {
		t.ins.ackLatency.Record(context.Background(), d.Seconds(), t.attrs)
	}
}

// onEvent is the event.Func given to every stage.
func (t *telemetry) onEvent(e event.Event) {
	switch e.Kind {
	case event.Received:
		t.add(t.ins.received, e.Count)
	case event.Ack:
		t.add(t.ins.acked, e.Count)
	case event.Nack:
		t.add(t.ins.nacked, e.Count)
	case event.Extend:
		t.c.extended.Add(uint64(e.Count))
		t.add(t.ins.extended, e.Count)
	case event.Expired:
		t.add(t.ins.expired, e.Count)
	case event.Reconnect:
		t.c.reconnects.Add(1)
		t.add(t.ins.reconnects, 1)
	case event.AckFailed:
		t.c.ackFailures.Add(uint64(e.Count))
	}
	if e.Err != nil {
		t.c.setErr(e.Err)
	}
	if t.log != nil {
		t.logEvent(e)
	}
}

func (t *telemetry) logEvent(e event.Event) {
	level := slog.LevelDebug
	switch e.Kind {
	case event.Disconnect, event.ConnectFailed, event.Reconnect, event.Expired, event.Retry:
		level = slog.LevelWarn
	case event.Terminal, event.AckFailed, event.ReceiptModackFail:
		level = slog.LevelError
	case event.Connect:
		level = slog.LevelInfo
	}
	if !t.log.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{slog.String("subscription", t.sub)}
	if e.Count != 0 {
		attrs = append(attrs, slog.Int("count", e.Count))
	}
	if e.Stream != 0 {
		attrs = append(attrs, slog.Int("stream", e.Stream))
	}
	if e.Deadline != 0 {
		attrs = append(attrs, slog.Duration("deadline", e.Deadline))
	}
	if e.Delay != 0 {
		attrs = append(attrs, slog.Duration("delay", e.Delay))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.Any("error", e.Err))
	}
	t.log.LogAttrs(context.Background(), level, "pubsubflow: "+string(e.Kind), attrs...)
}
