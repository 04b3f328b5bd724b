package sink

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// streamSource is a minimal StreamingPull source for these tests (package
// source is the real one): one stream, no heartbeats, no reconnects. It
// binds every message to s on receipt.
func streamSource(client pubsubpb.SubscriberClient, sub string, maxOutstanding int64, s message.Settler) stage.Source[*message.Message] {
	return stage.SourceFunc[*message.Message](func(g *stage.Group) <-chan *message.Message {
		out := make(chan *message.Message)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			stream, err := client.StreamingPull(ctx)
			if err != nil {
				return err
			}
			if err := stream.Send(&pubsubpb.StreamingPullRequest{
				Subscription:             sub,
				StreamAckDeadlineSeconds: 60,
				MaxOutstandingMessages:   maxOutstanding,
				ClientId:                 "sink-test",
			}); err != nil {
				return err
			}
			for {
				resp, err := stream.Recv()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("recv: %w", err)
				}
				for _, rm := range resp.ReceivedMessages {
					m := message.FromReceived(rm, sub, resp.SubscriptionProperties, time.Now())
					message.Bind(m, s)
					select {
					case out <- m:
					case <-ctx.Done():
						return nil
					}
				}
			}
		})
		return out
	})
}

// rig is a consuming pipeline against a pubsubtest server:
// stream → FlowGate → Acknowledge, with one Settler.
type rig struct {
	srv    *pubsubtest.Server
	sub    string
	topic  string
	client pubsubpb.SubscriberClient
	fc     *flow.FlowControl
	acks   *ack.Acknowledger
	g      *stage.Group
}

func newRig(t *testing.T, srv *pubsubtest.Server, maxMessages int64, cfg ack.Config, opts ...func(*pubsubtest.SubscriptionConfig)) *rig {
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
	r.fc = flow.NewFlowControl(maxMessages, 0)
	if cfg.Flow == nil {
		cfg.Flow = r.fc
	}
	if r.acks, err = ack.New(r.client, sub, cfg); err != nil {
		t.Fatal(err)
	}
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

// startGated runs stream → FlowGate and returns the gate's output.
func (r *rig) startGated() <-chan *message.Message {
	r.g = stage.NewGroup(context.Background())
	settler := NewSettler(r.acks, r.fc, nil)
	src := streamSource(r.client, r.sub, r.fc.MaxMessages(), settler).Run(r.g)
	return flow.FlowGate(r.fc).Run(r.g, src)
}

// stop cancels the pipeline and closes the acknowledger.
func (r *rig) stop(t *testing.T) {
	t.Helper()
	r.g.Cancel()
	if err := r.g.Wait(); err != nil {
		t.Errorf("pipeline: %v", err)
	}
	if err := r.acks.Close(context.Background()); err != nil {
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
