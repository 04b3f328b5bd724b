package bench

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
)

type zzTap struct {
	mu        sync.Mutex
	delivered map[string]time.Time
	acked     map[string]time.Time
	ackSent   map[string]time.Time
}

func (t *zzTap) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	sent := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if ar, ok := req.(*pubsubpb.AcknowledgeRequest); ok && err == nil {
		now := time.Now()
		t.mu.Lock()
		for _, id := range ar.AckIds {
			t.acked[id] = now
			t.ackSent[id] = sent
		}
		t.mu.Unlock()
	}
	return err
}

func (t *zzTap) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &zzStream{ClientStream: cs, t: t}, nil
}

type zzStream struct {
	grpc.ClientStream
	t *zzTap
}

func (s *zzStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*pubsubpb.StreamingPullResponse); ok && err == nil {
		now := time.Now()
		s.t.mu.Lock()
		for _, rm := range resp.ReceivedMessages {
			s.t.delivered[rm.AckId] = now
		}
		s.t.mu.Unlock()
	}
	return err
}

func med(ds []time.Duration) (time.Duration, time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], ds[len(ds)*99/100]
}

func BenchmarkZZSplit(b *testing.B) {
	e := newEnv(b, 60*time.Second)
	tap := &zzTap{delivered: map[string]time.Time{}, acked: map[string]time.Time{}, ackSent: map[string]time.Time{}}
	t := &tappedEnv{env: e, opts: []grpc.DialOption{grpc.WithUnaryInterceptor(tap.unary), grpc.WithStreamInterceptor(tap.stream)}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.publish(b, b.N, 64)
	var mu sync.Mutex
	handledAt := map[string]time.Time{}
	recvAt := map[string]time.Time{}
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		cc := t.dial(b)
		defer cc.Close()
		sub, err := pubsubflow.NewSubscriber(context.Background(), e.subscription(), pubsubflow.SubscriberConfig{Conn: cc})
		if err != nil {
			done <- err
			return
		}
		done <- sub.Run(ctx, 8, func(_ context.Context, m *pubsubflow.Message) error {
			now := time.Now()
			mu.Lock()
			handledAt[m.AckID] = now
			recvAt[m.AckID] = m.ReceiveTime
			mu.Unlock()
			return nil
		})
	}()
	for e.stats().Acked < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cancel()
	<-done
	tap.mu.Lock()
	defer tap.mu.Unlock()
	var d2r, r2h, h2s, s2a []time.Duration
	for id, d := range tap.delivered {
		a, ok := tap.acked[id]
		if !ok {
			continue
		}
		d2r = append(d2r, recvAt[id].Sub(d))
		r2h = append(r2h, handledAt[id].Sub(recvAt[id]))
		h2s = append(h2s, tap.ackSent[id].Sub(handledAt[id]))
		s2a = append(s2a, a.Sub(tap.ackSent[id]))
	}
	for _, x := range []struct {
		n string
		d []time.Duration
	}{{"deliver->decode", d2r}, {"decode->handler", r2h}, {"handler->ackSent", h2s}, {"ackSent->ackDone", s2a}} {
		p50, p99 := med(x.d)
		b.Logf("%s p50 %v p99 %v", x.n, p50, p99)
	}
}
