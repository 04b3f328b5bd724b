package source

import (
	"context"
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
	fix    *pubsubtest.Fixture
}

func newHarness(t *testing.T, sc pubsubtest.SubscriptionConfig, opts ...pubsubtest.Option) *harness {
	t.Helper()
	f := pubsubtest.NewFixture(t, sc, append([]pubsubtest.Option{pubsubtest.WithBufconn()}, opts...)...)
	return &harness{srv: f.Server, client: f.Subscriber, topic: f.Topic, sub: f.Sub, fix: f}
}

// publish publishes n messages of size bytes each ("m<i>" padded).
func (h *harness) publish(t *testing.T, n, size int) {
	t.Helper()
	h.fix.Publish(t, pubsubtest.Messages(n, func(_ int, m *pubsubpb.PubsubMessage) {
		if len(m.Data) < size {
			m.Data = append(m.Data, make([]byte, size-len(m.Data))...)
		}
	})...)
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

// all returns every event so far.
func (r *recorder) all() []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stamped(nil), r.events...)
}
