package ack

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// countingClient answers at once and only counts.
type countingClient struct {
	pubsubpb.SubscriberClient
	ids, calls atomic.Int64
}

func (c *countingClient) Acknowledge(_ context.Context, req *pubsubpb.AcknowledgeRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	c.calls.Add(1)
	c.ids.Add(int64(len(req.AckIds)))
	return &emptypb.Empty{}, nil
}

func (c *countingClient) ModifyAckDeadline(_ context.Context, req *pubsubpb.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	c.calls.Add(1)
	c.ids.Add(int64(len(req.AckIds)))
	return &emptypb.Empty{}, nil
}

// BenchmarkAck measures the hot path: acks from parallel goroutines
// (GOMAXPROCS of them) through batching and RPC dispatch.
func BenchmarkAck(b *testing.B) {
	benchmarkAck(b, Config{}, false)
}

// BenchmarkAckExactlyOnce adds a Result per ack, settled on confirmation.
func BenchmarkAckExactlyOnce(b *testing.B) {
	benchmarkAck(b, Config{}, true)
}

func benchmarkAck(b *testing.B, cfg Config, eo bool) {
	idList := make([]string, 1<<16)
	for i := range idList {
		idList[i] = "projects/p/subscriptions/s/ack-" + strconv.Itoa(i)
	}
	c := &countingClient{}
	a, err := New(c, testSub, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			if eo {
				a.AckWithResult(idList[i&(len(idList)-1)])
			} else {
				a.Ack(idList[i&(len(idList)-1)])
			}
		}
	})
	if err := a.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if got := c.ids.Load(); got != int64(b.N) {
		b.Fatalf("sent %d ack ids, want %d", got, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acks/s")
	b.ReportMetric(float64(b.N)/float64(max(c.calls.Load(), 1)), "ids/rpc")
}
