package pubsubflow

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestTelemetry: with a MeterProvider and a Logger, a run reports its
// counters, gauges and ack latency, and logs the stream's connection.
func TestTelemetry(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 300, nil)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := e.subscriber(t, SubscriberConfig{MeterProvider: mp, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, s, 4, func(ctx context.Context, m *Message) error {
		if string(m.Data) == "7" && m.DeliveryAttempt == 1 {
			return context.DeadlineExceeded // nacked once
		}
		return nil
	})
	waitFor(t, "300 acks", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 300 })
	waitFor(t, "ack events", 10*time.Second, func() bool { return sum(t, reader, "pubsubflow.subscriber.acked") == 300 })
	if got := sum(t, reader, "pubsubflow.subscriber.received"); got != 301 {
		t.Errorf("received metric %d, want 301", got)
	}
	if got := sum(t, reader, "pubsubflow.subscriber.nacked"); got != 1 {
		t.Errorf("nacked metric %d, want 1", got)
	}
	if got := histCount(t, reader, "pubsubflow.subscriber.ack_latency"); got != 300 {
		t.Errorf("ack latency samples %d, want 300", got)
	}
	if _, ok := find(t, reader, "pubsubflow.subscriber.outstanding"); !ok {
		t.Error("no outstanding gauge")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "pubsubflow: connect") {
		t.Errorf("no connect log line in:\n%s", logs.String())
	}
}

func find(t *testing.T, r *sdkmetric.ManualReader, name string) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func sum(t *testing.T, r *sdkmetric.ManualReader, name string) int64 {
	m, ok := find(t, r, name)
	if !ok {
		return 0
	}
	var n int64
	for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
		n += p.Value
	}
	return n
}

func histCount(t *testing.T, r *sdkmetric.ManualReader, name string) uint64 {
	m, ok := find(t, r, name)
	if !ok {
		return 0
	}
	var n uint64
	for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		n += p.Count
	}
	return n
}
