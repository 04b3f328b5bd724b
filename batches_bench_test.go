package pubsubflow

import (
	"context"
	"testing"
)

// BenchmarkRunBatchesOverhead is BenchmarkSubscriberOverhead for
// RunBatches: the same stub server, RunBatches(ctx, 8, Size 100, a
// handler that returns nil).
//
//	go test -run '^$' -bench RunBatchesOverhead -benchtime 200000x .
func BenchmarkRunBatchesOverhead(b *testing.B) {
	benchOverhead(b, func(ctx context.Context, sub *Subscriber, handled func(n int)) error {
		return sub.RunBatches(ctx, 8, BatchOptions{Size: 100}, func(_ context.Context, ms []*Message) error {
			handled(len(ms))
			return nil
		})
	})
}
