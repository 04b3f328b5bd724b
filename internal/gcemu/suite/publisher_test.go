package suite

import (
	"context"
	"fmt"
	"github.com/pubsubflow/pubsubflow/publisher"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

const (
	pubKeys   = 4
	pubPerKey = 100
	pubNoKey  = 50
)

// TestOurPublisherToGoogleSubscriber: what our Publisher sends — data
// (binary too), attributes, ordering keys — reaches Google's subscriber
// intact, and each key's messages arrive in publish order.
func TestOurPublisherToGoogleSubscriber(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	sub := e.subscription(t, topic, &pubsubpb.Subscription{EnableMessageOrdering: true})

	p, err := publisher.New(e.conn, topic, publisher.Config{EnableOrdering: true})
	if err != nil {
		t.Fatal(err)
	}
	type sent struct {
		data  []byte
		attrs map[string]string
		key   string
	}
	want := map[string]sent{} // by message id
	ctx := bounded(t, time.Minute)
	publish := func(key string, seq int) {
		m := &publisher.Message{
			Data:        append([]byte{0, 0xff, byte(seq)}, fmt.Sprintf("payload %s/%d", key, seq)...),
			Attributes:  map[string]string{"seq": strconv.Itoa(seq), "key": key, "ünïcode": "välue"},
			OrderingKey: key,
		}
		id, err := p.Publish(ctx, m).Get(ctx)
		if err != nil {
			t.Fatalf("Publish %s/%d: %v", key, seq, err)
		}
		want[id] = sent{m.Data, m.Attributes, key}
	}
	// Interleave keys, as a producer would.
	for seq := range pubPerKey {
		for k := range pubKeys {
			publish(fmt.Sprintf("key-%d", k), seq)
		}
		if seq < pubNoKey {
			publish("", seq)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	got := map[string]int{}     // by id: deliveries
	order := map[string][]int{} // by key: seq in arrival order
	var problems []string
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = e.google.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		w, ok := want[m.ID]
		switch {
		case !ok:
			problems = append(problems, "unknown id "+m.ID)
		case string(m.Data) != string(w.data) || !maps.Equal(m.Attributes, w.attrs) || m.OrderingKey != w.key:
			problems = append(problems, fmt.Sprintf("%s: got %q %v key %q, sent %q %v key %q", m.ID, m.Data, m.Attributes, m.OrderingKey, w.data, w.attrs, w.key))
		}
		if got[m.ID]++; got[m.ID] == 1 && m.OrderingKey != "" {
			seq, _ := strconv.Atoi(m.Attributes["seq"])
			order[m.OrderingKey] = append(order[m.OrderingKey], seq)
		}
		if len(got) == len(want) {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("%d messages differ from what was sent: %q", len(problems), problems[:min(5, len(problems))])
	}
	if len(got) != len(want) {
		t.Fatalf("Google's subscriber got %d of %d within a minute", len(got), len(want))
	}
	for key, seqs := range order {
		for i, s := range seqs {
			if s != i {
				t.Fatalf("key %s arrived in order %v, want 0…%d", key, seqs, pubPerKey-1)
			}
		}
	}
	if len(order) != pubKeys {
		t.Fatalf("%d keys arrived, want %d", len(order), pubKeys)
	}
}
