package source_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// heapNow is the live heap after a full collection.
func heapNow() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestHeldMessagesKeepOnlyTheirOwnData: 100 messages held, one from each
// of 100 responses of 200 messages of 1 KiB (the others acked), keep
// about their own 100 KiB alive, not their responses' 20 MB (invariant 4:
// memory bounded by the byte budget plus a constant; no record keeps
// another message's data alive). Once they are acked too, the heap goes
// back to where it was before they came, without another response to
// trigger a clean-up. Real gRPC over loopback against pubsubtest.
func TestHeldMessagesKeepOnlyTheirOwnData(t *testing.T) {
	const responses, per, size = 100, 200, 1 << 10
	const bound = 10 << 20 // over the baseline, while the 100 are held
	const back = 1 << 20   // over the baseline, once they are acked
	f := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: 10 * time.Minute}, pubsubtest.WithMaxMessagesPerResponse(per))
	src, err := source.Subscribe(f.Subscriber, source.Config{
		Subscription: f.Sub, StreamAckDeadline: 10 * time.Minute,
		MaxOutstandingMessages: -1, MaxOutstandingBytes: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := stage.NewGroup(ctx)
	out := src.RunBatches(g)
	defer func() {
		g.Cancel()
		_ = g.Wait()
		if err := src.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	msgs := pubsubtest.Messages(per, func(_ int, m *pubsubpb.PubsubMessage) { m.Data = make([]byte, size) })
	// round publishes a response's worth and acks all of it but, when
	// hold, its first message, which it returns.
	round := func(hold bool) (kept *source.Message) {
		f.Publish(t, msgs...)
		for got := 0; got < per; {
			b, ok := <-out
			if !ok {
				t.Fatalf("output closed: %v", g.Err())
			}
			for _, m := range b {
				if hold && kept == nil {
					kept = m
				} else {
					m.Ack()
				}
			}
			got += len(b)
		}
		return kept
	}
	round(false) // warm up: the stream, its buffers, the acknowledger
	baseline := heapNow()
	held := make([]*source.Message, 0, responses)
	for range responses {
		held = append(held, round(true))
	}
	grew := heapNow() - baseline
	t.Logf("held: %.2f MiB over the baseline", float64(grew)/(1<<20))
	if grew > bound {
		t.Errorf("%d messages of %d B held, one from each of %d responses: the heap grew by %.1f MiB over the baseline; want at most %d MiB", len(held), size, responses, float64(grew)/(1<<20), bound>>20)
	}
	for _, m := range held {
		m.Ack()
	}
	held = nil
	deadline := time.Now().Add(10 * time.Second)
	for grew = heapNow() - baseline; grew > back && time.Now().Before(deadline); grew = heapNow() - baseline {
		time.Sleep(50 * time.Millisecond) // pacing the collections, not an assertion
	}
	t.Logf("acked: %.2f MiB over the baseline", float64(grew)/(1<<20))
	if grew > back {
		t.Errorf("10 s after the held messages were acked the heap is still %.1f MiB over the baseline; want at most %d MiB", float64(grew)/(1<<20), back>>20)
	}
	runtime.KeepAlive(held)
}
