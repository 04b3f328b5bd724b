package suite

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
)

// maxAttempts is the dead-letter policy's limit (the API's smallest).
const maxAttempts = 5

// TestNackRedeliveryToDeadLetter: a handler that always fails nacks; the
// message comes back with delivery attempts 1, 2, … 5, and after the fifth
// it lands in the dead-letter topic, data intact.
func TestNackRedeliveryToDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	dlTopic := e.topic(t)
	dlSub := e.subscription(t, dlTopic, nil) // before anything is dead-lettered
	sub := e.subscription(t, topic, &pubsubpb.Subscription{
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dlTopic, MaxDeliveryAttempts: maxAttempts},
	})
	ids := e.publish(t, topic, 1, 32)

	var mu sync.Mutex
	var attempts []int
	fifth := make(chan struct{})
	r := e.start(t, sub, pubsubflow.SubscriberConfig{}, 1, func(_ context.Context, m *pubsubflow.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == ids[0] {
			attempts = append(attempts, m.DeliveryAttempt)
			if len(attempts) == maxAttempts {
				close(fifth)
			}
		}
		return errors.New("always fails") // nack: redeliver now
	})
	select {
	case <-fifth:
	case <-time.After(time.Minute):
		mu.Lock()
		t.Fatalf("delivery attempts within a minute: %v, want %d", attempts, maxAttempts)
	}
	// The emulator forwards the message to the dead-letter topic when it
	// next dispatches it to an open stream (the delivery after the fifth),
	// so the subscriber keeps running until the message arrives there.
	var dead []*pubsub.Message
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.google.Subscriber(dlSub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		dead = append(dead, m)
		mu.Unlock()
		cancel()
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("delivery attempts %v, want 1…%d", attempts, maxAttempts)
	}
	if len(dead) == 0 {
		t.Fatal("nothing in the dead-letter topic within a minute")
	}
	if len(dead[0].Data) != 32 || string(dead[0].Data[:1]) != "0" || dead[0].Attributes["seq"] != "0" {
		t.Fatalf("dead-lettered message %q %v, want the published one", dead[0].Data, dead[0].Attributes)
	}
}
