package source

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// harness is a pubsubtest server on bufconn with one topic and one
// subscription, and a client connected to it. Make it inside a synctest
// bubble; it closes in t.Cleanup.
type harness struct {
	srv    *pubsubtest.Server
	client pubsubpb.SubscriberClient
	topic  string
	sub    string
}

func newHarness(t *testing.T, sc pubsubtest.SubscriptionConfig, opts ...pubsubtest.Option) *harness {
	t.Helper()
	srv, err := pubsubtest.NewServer(append([]pubsubtest.Option{pubsubtest.WithBufconn(), pubsubtest.WithDeliveryAttemptAlways()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cc, err := srv.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx := context.Background()
	topic, err := srv.CreateTopic(ctx, "topic")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name == "" {
		sc.Name = "sub"
	}
	sc.Topic = topic
	sub, err := srv.CreateSubscription(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{srv: srv, client: pubsubpb.NewSubscriberClient(cc), topic: topic, sub: sub}
}

// publish publishes n messages of size bytes each ("m<i>" padded).
func (h *harness) publish(t *testing.T, n, size int) {
	t.Helper()
	for start := 0; start < n; start += 1000 {
		batch := make([]*pubsubpb.PubsubMessage, 0, min(1000, n-start))
		for i := start; i < min(start+1000, n); i++ {
			data := fmt.Appendf(nil, "m%d", i)
			if len(data) < size {
				data = append(data, make([]byte, size-len(data))...)
			}
			batch = append(batch, &pubsubpb.PubsubMessage{Data: data})
		}
		if _, err := h.srv.Publish(context.Background(), h.topic, batch...); err != nil {
			t.Fatal(err)
		}
	}
}

// ack acknowledges ids by unary RPC, split as the acknowledger splits.
func (h *harness) ack(ctx context.Context, ids []string) error {
	var err error
	ackids.Split(ids, 0, 0, func(chunk []string) {
		if err == nil {
			_, err = h.client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: h.sub, AckIds: chunk})
		}
	})
	return err
}

// recorder keeps every event with the (virtual) time it happened.
type recorder struct {
	mu     sync.Mutex
	events []stamped
}

type stamped struct {
	event.Event
	at time.Time
}

func (r *recorder) record(e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, stamped{e, time.Now()})
}

func (r *recorder) of(k event.Kind) []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []stamped
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}
