package sink

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// rig is a consuming pipeline against a pubsubtest server:
// source.Subscribe with FlowGate fused in → Acknowledge.
type rig struct {
	srv    *pubsubtest.Server
	sub    string
	topic  string
	client pubsubpb.SubscriberClient
	fc     *flow.FlowControl
	src    *source.Source
	g      *stage.Group
}

func newRig(t *testing.T, srv *pubsubtest.Server, maxMessages int64, opts ...func(*pubsubtest.SubscriptionConfig)) *rig {
	t.Helper()
	ctx := context.Background()
	topic, err := srv.CreateTopic(ctx, "topic")
	if err != nil {
		t.Fatal(err)
	}
	sc := pubsubtest.SubscriptionConfig{Name: "sub", Topic: topic}
	for _, o := range opts {
		o(&sc)
	}
	sub, err := srv.CreateSubscription(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{srv: srv, sub: sub, topic: topic, client: pubsubpb.NewSubscriberClient(srv.ClientConn())}
	r.fc = flow.NewFlowControl(maxMessages, flow.Unlimited)
	src, err := source.Subscribe(r.client, source.Config{Subscription: sub, MaxOutstandingMessages: maxMessages})
	if err != nil {
		t.Fatal(err)
	}
	r.src = src.With(flow.FlowGate(r.fc))
	return r
}

func (r *rig) publish(t *testing.T, n int) {
	t.Helper()
	for done := 0; done < n; {
		batch := make([]*pubsubpb.PubsubMessage, min(1000, n-done))
		for i := range batch {
			batch[i] = &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, "m%d", done+i)}
		}
		if _, err := r.srv.Publish(context.Background(), r.topic, batch...); err != nil {
			t.Fatal(err)
		}
		done += len(batch)
	}
}

// start runs the pipeline; the server's per-stream limit equals the
// client's, as a subscriber sets it.
func (r *rig) start() {
	gated := r.startGated()
	r.g.Go(func(context.Context) error { return Acknowledge(Policy{}).Run(r.g, gated) })
}

// startGated runs the source and returns its output.
func (r *rig) startGated() <-chan *source.Message {
	r.g = stage.NewGroup(context.Background())
	return r.src.Run(r.g)
}

// stop stops the source and the pipeline, waits for it, and closes the
// source.
func (r *rig) stop(t *testing.T) {
	t.Helper()
	r.src.Stop()
	r.g.Cancel()
	if err := r.g.Wait(); err != nil {
		t.Errorf("pipeline: %v", err)
	}
	if err := r.src.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// waitAcked waits until the server counted n acks, polling every step
// (virtual time inside a synctest bubble), for at most limit.
func (r *rig) waitAcked(t *testing.T, n int64, step, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st := r.srv.SubscriptionStats(r.sub)
		if st.Acked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the server counted %d of %d acks: %+v", limit, st.Acked, n, st)
		}
		time.Sleep(step)
	}
}
