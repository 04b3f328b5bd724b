package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow"
)

// batchWait is the Wait of the batched client: short, so the run's last,
// partial batch (the backlog is spent, the budget is not) adds at most
// that much to the clock.
const batchWait = 20 * time.Millisecond

// BenchmarkRunBatches is BenchmarkThroughput's run (b.N messages from a
// server in a child process, loopback TCP, one stream, max outstanding
// 1,000, 8 workers) for Run and for RunBatches with batches of 100, in
// the same run: msgs/s and cpu-ns/msg of the client's process.
//
//	go test -run '^$' -bench 'RunBatches$' -benchtime 100000x -count 6 ./bench/ | tee batches.txt
//	benchstat -col /client batches.txt
func BenchmarkRunBatches(b *testing.B) {
	for _, payload := range []int{64, 1024} {
		for _, c := range []client{{"run", runOurs}, {"batches100", runOurBatches}} {
			b.Run(fmt.Sprintf("payload=%dB/client=%s", payload, c.name), func(b *testing.B) {
				benchThroughput(b, c, payload, settings{outstanding: 1000, streams: 1})
			})
		}
	}
}

// runOurBatches is runOurs with RunBatches: 8 workers, batches of up to
// 100 messages, a handler that touches each message and returns nil
// (acking the batch).
func runOurBatches(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
	cc := e.dial(tb)
	defer cc.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), e.subscription(), pubsubflow.SubscriberConfig{
		Conn:                   cc,
		MaxOutstandingMessages: int64(s.outstanding),
		MaxOutstandingBytes:    byteBudget,
		Streams:                s.streams,
	})
	if err != nil {
		return err
	}
	return sub.RunBatches(ctx, ourParallelism, pubsubflow.BatchOptions{Size: 100, Wait: batchWait},
		func(_ context.Context, ms []*pubsubflow.Message) error {
			for range ms {
				handled()
			}
			return nil
		})
}
