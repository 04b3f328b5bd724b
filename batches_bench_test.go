package pubsubflow

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRunBatchesOverhead is BenchmarkSubscriberOverhead for
// RunBatches: the same stub server, RunBatches(ctx, 8, Size 100, a
// handler that returns nil).
//
//	go test -run '^$' -bench RunBatchesOverhead -benchtime 200000x .
func BenchmarkRunBatchesOverhead(b *testing.B) {
	for _, outstanding := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("outstanding=%d", outstanding), func(b *testing.B) {
			c := newStubServer(b.N, int64(outstanding))
			sub, err := NewSubscriber(context.Background(), "projects/proj/subscriptions/sub", SubscriberConfig{
				Client:                 c,
				MaxOutstandingMessages: int64(outstanding),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var handled atomic.Int64
			all := make(chan struct{})
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				done <- sub.RunBatches(ctx, 8, BatchOptions{Size: 100}, func(_ context.Context, ms []*Message) error {
					// Responses are whole (100), so the count may pass b.N.
					n := int64(len(ms))
					if after := handled.Add(n); after >= int64(b.N) && after-n < int64(b.N) {
						close(all)
					}
					return nil
				})
			}()
			<-all
			elapsed, cpu := time.Since(start), processCPU()-cpu0
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
