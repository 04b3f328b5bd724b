package suite

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
)

const (
	orderKeys   = 5
	orderPerKey = 200
)

// TestOrderingKeysOurSubscriber: messages published in order per key by
// Google's publisher reach our Subscriber's handlers in that order, one
// at a time per key, keys in parallel.
func TestOrderingKeysOurSubscriber(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	sub := e.subscription(t, topic, &pubsubpb.Subscription{EnableMessageOrdering: true})

	pub := e.google.Publisher(topic)
	pub.EnableMessageOrdering = true
	ctx := bounded(t, time.Minute)
	var results []*pubsub.PublishResult
	for seq := range orderPerKey {
		for k := range orderKeys {
			results = append(results, pub.Publish(ctx, &pubsub.Message{
				Data:        []byte(fmt.Sprintf("%d/%d", k, seq)),
				Attributes:  map[string]string{"seq": strconv.Itoa(seq)},
				OrderingKey: fmt.Sprintf("key-%d", k),
			}))
		}
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pub.Stop()

	var mu sync.Mutex
	next := map[string]int{}     // by key: the seq expected next
	inFlight := map[string]int{} // by key: handlers running now
	var problems []string
	maxParallel := 0
	running := 0
	all := make(chan struct{})
	done := 0
	r := e.start(t, sub, pubsubflow.SubscriberConfig{}, 8, func(_ context.Context, m *pubsubflow.Message) error {
		seq, _ := strconv.Atoi(m.Attributes["seq"])
		mu.Lock()
		inFlight[m.OrderingKey]++
		running++
		maxParallel = max(maxParallel, running)
		if inFlight[m.OrderingKey] > 1 {
			problems = append(problems, fmt.Sprintf("%s/%d handled while another of its key was", m.OrderingKey, seq))
		}
		if seq != next[m.OrderingKey] {
			problems = append(problems, fmt.Sprintf("%s: got %d, want %d", m.OrderingKey, seq, next[m.OrderingKey]))
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // work: lets another message of the key overlap if ordering were broken
		mu.Lock()
		defer mu.Unlock()
		inFlight[m.OrderingKey]--
		running--
		next[m.OrderingKey] = seq + 1
		if done++; done == orderKeys*orderPerKey {
			close(all)
		}
		return nil
	})
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		t.Fatalf("%d of %d handled within 2 minutes; next by key %v", done, orderKeys*orderPerKey, next)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("%d ordering violations: %q", len(problems), problems[:min(5, len(problems))])
	}
	if maxParallel < 2 {
		t.Fatalf("at most %d handler ran at once: keys were not processed in parallel", maxParallel)
	}
}
