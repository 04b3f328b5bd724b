package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// traceFile writes every span that ends as one JSON object per line, so a
// run's traces can be read (jq, a script) without a collector.
type traceFile struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error
}

// jsonSpan is one line of a --trace file.
type jsonSpan struct {
	Name         string         `json:"name"`
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id,omitempty"`
	Kind         string         `json:"kind"`
	Scope        string         `json:"scope"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	DurationNS   int64          `json:"duration_ns"`
	Status       string         `json:"status"`
	StatusDesc   string         `json:"status_description,omitempty"`
	Attributes   map[string]any `json:"attributes,omitempty"`
	Events       []jsonEvent    `json:"events,omitempty"`
	Links        []jsonLink     `json:"links,omitempty"`
}

type jsonEvent struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

type jsonLink struct {
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// openTraceFile creates path and returns a tracer provider that writes
// every span there; shutdown flushes and closes the file.
func openTraceFile(path string) (*sdktrace.TracerProvider, func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--trace: %w", err)
	}
	tf := &traceFile{f: f, w: bufio.NewWriter(f)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tf))
	shutdown := func() error {
		err := tp.Shutdown(context.Background())
		if cerr := tf.f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return tp, shutdown, nil
}

// ExportSpans writes spans as JSON lines.
func (tf *traceFile) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	enc := json.NewEncoder(tf.w)
	for _, s := range spans {
		js := jsonSpan{
			Name:       s.Name(),
			TraceID:    s.SpanContext().TraceID().String(),
			SpanID:     s.SpanContext().SpanID().String(),
			Kind:       s.SpanKind().String(),
			Scope:      s.InstrumentationScope().Name,
			Start:      s.StartTime(),
			End:        s.EndTime(),
			DurationNS: s.EndTime().Sub(s.StartTime()).Nanoseconds(),
			Status:     s.Status().Code.String(),
			StatusDesc: s.Status().Description,
			Attributes: attrMap(s.Attributes()),
		}
		if p := s.Parent(); p.IsValid() {
			js.ParentSpanID = p.SpanID().String()
		}
		for _, e := range s.Events() {
			js.Events = append(js.Events, jsonEvent{Name: e.Name, Time: e.Time, Attributes: attrMap(e.Attributes)})
		}
		for _, l := range s.Links() {
			js.Links = append(js.Links, jsonLink{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String(), Attributes: attrMap(l.Attributes)})
		}
		if err := enc.Encode(js); err != nil && tf.err == nil {
			tf.err = err
		}
	}
	return tf.err
}

// Shutdown flushes what is buffered.
func (tf *traceFile) Shutdown(context.Context) error {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	if err := tf.w.Flush(); err != nil && tf.err == nil {
		tf.err = err
	}
	return tf.err
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}
