package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
)

// BenchmarkAckLatency measures, for each client (exactly-once off), how
// long after a message's delivery the server has its ack, and how many
// Acknowledge RPCs the acks take:
//
//   - rate=low: 10 messages a second (b.N messages published one every
//     100 ms), each handled at once (a handler that returns nil / acks);
//   - rate=full: a backlog of b.N messages consumed as fast as the
//     client goes (max outstanding 1,000).
//
// The server runs in this process (pubsubtest over loopback TCP); the
// client's connection carries interceptors that time each message from
// the moment the stream's Recv returned the response that delivered it
// to the moment the Acknowledge carrying its ack id was answered (the
// server has it then: an upper bound on "the server sees the ack", by
// the reply's way back, tens of microseconds on loopback). Metrics:
// p50-ms, p99-ms of that latency; rpcs/ack = Acknowledge calls ÷ ack ids
// they carried.
//
//	go test -run '^$' -bench 'AckLatency/rate=low' -benchtime 100x ./bench/     # 10 s per client
//	go test -run '^$' -bench 'AckLatency/rate=full' -benchtime 100000x ./bench/
func BenchmarkAckLatency(b *testing.B) {
	for _, rate := range []string{"low", "full"} {
		for _, c := range clients {
			b.Run(fmt.Sprintf("rate=%s/client=%s", rate, c.name), func(b *testing.B) {
				benchAckLatency(b, c, rate == "full")
			})
		}
	}
}

// lowRateEvery is the publishing period of rate=low (10 messages a
// second).
const lowRateEvery = 100 * time.Millisecond

func benchAckLatency(b *testing.B, c client, full bool) {
	e := newEnv(b, 60*time.Second)
	tap := newAckTap()
	t := &tappedEnv{env: e, opts: tap.dialOptions()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if full {
		e.publish(b, b.N, 64)
	} else {
		go func() {
			tick := time.NewTicker(lowRateEvery)
			defer tick.Stop()
			for range b.N {
				if err := e.publishErr(1, 64); err != nil {
					b.Error(err)
					return
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- c.run(ctx, b, t, settings{outstanding: 1000, streams: 1}, func() {}) }()
	deadline := time.After(2*time.Minute + time.Duration(b.N)*lowRateEvery)
	for e.stats().Acked < int64(b.N) {
		select {
		case err := <-done:
			b.Fatalf("%s stopped early: %v", c.name, err)
		case <-deadline:
			b.Fatalf("%s: timed out: %+v", c.name, e.stats())
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	if st := e.stats(); st.Redelivered != 0 || st.Expired != 0 {
		b.Errorf("%s: %d redelivered, %d expired", c.name, st.Redelivered, st.Expired)
	}
	lat, calls, ids := tap.result()
	if len(lat) == 0 {
		b.Fatalf("%s: no ack timed", c.name)
	}
	b.ReportMetric(percentile(lat, 0.50), "p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(calls)/float64(ids), "rpcs/ack")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// percentile returns the q-quantile of ds (sorted in place) in
// milliseconds.
func percentile(ds []time.Duration, q float64) float64 {
	slices.Sort(ds)
	i := min(int(q*float64(len(ds))), len(ds)-1)
	return float64(ds[i]) / float64(time.Millisecond)
}

// tappedEnv is env dialed with extra options (the tap's interceptors).
type tappedEnv struct {
	*env
	opts []grpc.DialOption
}

func (t *tappedEnv) dial(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	cc, err := t.srv.Dial(context.Background(), t.opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return cc
}

// ackTap times each ack id from its delivery (the stream's Recv returned
// it) to the answer of the Acknowledge that carried it.
type ackTap struct {
	mu        sync.Mutex
	delivered map[string]time.Time
	latencies []time.Duration
	calls     atomic.Int64
	ids       atomic.Int64
}

func newAckTap() *ackTap { return &ackTap{delivered: map[string]time.Time{}} }

func (t *ackTap) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithUnaryInterceptor(t.unary),
		grpc.WithStreamInterceptor(t.stream),
	}
}

func (t *ackTap) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if ar, ok := req.(*pubsubpb.AcknowledgeRequest); ok && err == nil {
		now := time.Now()
		t.calls.Add(1)
		t.ids.Add(int64(len(ar.AckIds)))
		t.mu.Lock()
		for _, id := range ar.AckIds {
			if at, ok := t.delivered[id]; ok {
				t.latencies = append(t.latencies, now.Sub(at))
				delete(t.delivered, id)
			}
		}
		t.mu.Unlock()
	}
	return err
}

func (t *ackTap) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &tappedStream{ClientStream: cs, t: t}, nil
}

type tappedStream struct {
	grpc.ClientStream
	t *ackTap
}

func (s *tappedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*pubsubpb.StreamingPullResponse); ok && err == nil && len(resp.ReceivedMessages) > 0 {
		now := time.Now()
		s.t.mu.Lock()
		for _, rm := range resp.ReceivedMessages {
			s.t.delivered[rm.AckId] = now
		}
		s.t.mu.Unlock()
	}
	return err
}

func (t *ackTap) result() (lat []time.Duration, calls, ids int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.latencies), t.calls.Load(), t.ids.Load()
}
