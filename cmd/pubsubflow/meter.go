package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
)

// meter is the handler both consumer shapes run, and what it measures:
// processing latency (receipt → handled), ack latency (the handler's ack →
// the Acknowledge RPC that carried it returned), and copies of messages
// already handled (redeliveries as the client sees them).
type meter struct {
	delay time.Duration

	mu         sync.Mutex
	seen       map[string]struct{} // message ids handled
	duplicates int64
	processing []time.Duration
	ackLatency []time.Duration
	ackCalled  map[string]time.Time // ack id → when the handler acked
}

func newMeter(delay time.Duration) *meter {
	return &meter{delay: delay, seen: map[string]struct{}{}, ackCalled: map[string]time.Time{}}
}

// handle is the work: wait the handler delay, then ack.
func (m *meter) handle(ctx context.Context, msg *pubsubflow.Message) error {
	if m.delay > 0 {
		t := time.NewTimer(m.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	now := time.Now()
	m.mu.Lock()
	if _, dup := m.seen[msg.ID]; dup {
		m.duplicates++
	}
	m.seen[msg.ID] = struct{}{}
	m.processing = append(m.processing, now.Sub(msg.ReceiveTime))
	m.ackCalled[msg.AckID] = now
	m.mu.Unlock()
	msg.Ack()
	return nil
}

// interceptor records the ack latency of every ack id an Acknowledge RPC
// confirmed.
func (m *meter) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	ar, ok := req.(*pubsubpb.AcknowledgeRequest)
	if err != nil || !ok || !strings.HasSuffix(method, "/Acknowledge") {
		return err
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ar.AckIds {
		if at, ok := m.ackCalled[id]; ok {
			m.ackLatency = append(m.ackLatency, now.Sub(at))
			delete(m.ackCalled, id)
		}
	}
	return nil
}

// counts returns the distinct messages handled and the copies of ones
// handled before.
func (m *meter) counts() (distinct, duplicates int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.seen)), m.duplicates
}

// percentiles are latency quantiles.
type percentiles struct {
	n             int
	p50, p90, p99 time.Duration
}

func quantiles(ds []time.Duration) percentiles {
	if len(ds) == 0 {
		return percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return percentiles{n: len(s), p50: q(0.50), p90: q(0.90), p99: q(0.99)}
}

func (m *meter) latencies() (processing, ack percentiles) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return quantiles(m.processing), quantiles(m.ackLatency)
}
