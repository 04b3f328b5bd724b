package publisher

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestFlushUnderConcurrentPublish: while goroutines publish, unordered
// and on ordering keys, through a small flow-control budget (so Publish
// calls queue for permits and are granted as batches settle), every
// Flush returns only once each message published before it has settled;
// every message is published exactly once and the budget returns to zero.
func TestFlushUnderConcurrentPublish(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(t, Config{EnableOrdering: true, MaxMessages: 7, Flow: FlowConfig{MaxMessages: 40}})
	ctx := context.Background()
	const workers, each = 4, 300
	var (
		mu      sync.Mutex
		results []*Result
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				m := msg(w*each + i)
				if i%2 == 0 {
					m.OrderingKey = "k" + strconv.Itoa(i%5)
				}
				r := p.Publish(ctx, m)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	flushes := make(chan int)
	go func() {
		defer close(flushes)
		n := 0
		for !stop.Load() {
			mu.Lock()
			before := append([]*Result(nil), results...)
			mu.Unlock()
			if err := p.Flush(ctx); err != nil {
				t.Error(err)
				return
			}
			for _, r := range before {
				if !settled(r) {
					t.Error("Flush returned before a message published before it settled")
					return
				}
			}
			n++
		}
		flushes <- n
	}()
	wg.Wait()
	stop.Store(true)
	t.Logf("%d flushes", <-flushes)
	ids := map[string]bool{}
	for _, r := range results {
		id := mustGet(t, r)
		if ids[id] {
			t.Fatalf("id %s twice", id)
		}
		ids[id] = true
	}
	if len(ids) != workers*each {
		t.Fatalf("%d ids, want %d", len(ids), workers*each)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Published != workers*each || st.OutstandingMessages != 0 || st.OutstandingBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}
