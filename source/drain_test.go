package source_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// TestStopDrainsWithinTheDrainTimeout: a hand-built chain over real gRPC
// whose one slow worker holds its first message until its ctx ends, with
// the other messages buffered behind it (in the map's queue, or not yet
// handed on). After Stop the chain may go on for the drain timeout only:
// then what it still holds is nacked at once (the server has it back to
// deliver), no other message reaches the worker, and no goroutine is
// left.
func TestStopDrainsWithinTheDrainTimeout(t *testing.T) {
	before := goleak.IgnoreCurrent()
	const n, drain = 20, time.Second
	srv, client, sub := drainServer(t, n)
	ext, err := flow.NewExtender(client, flow.ExtenderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := source.Subscribe(client, source.Config{Subscription: sub, DrainTimeout: drain})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	release := make(chan struct{}) // lets a worker go on if the drain never ends
	slow := operators.ParallelMap(1, func(ctx context.Context, m *source.Message) (*source.Message, error) {
		calls.Add(1)
		select {
		case <-ctx.Done():
		case <-release:
		}
		return m, nil
	})
	done := make(chan error, 1)
	go func() {
		done <- pipeline.From(src).
			Via(flow.EagerTrack(ext, 0), flow.FlowGate(flow.NewFlowControl(n, flow.Unlimited)), slow).
			To(sink.Acknowledge(sink.Policy{}))
	}()
	waitFor(t, "every message received and the worker busy", func() bool {
		return src.Stats().Received == n && calls.Load() == 1
	})

	begin := time.Now()
	src.Stop()
	const margin = 10 * time.Second // a loaded machine's scheduling, not a tolerance on the drain
	select {
	case err := <-done:
		took := time.Since(begin)
		if err != nil || took < drain || took > drain+margin {
			t.Errorf("the chain ended %v after Stop with %v; want nil, within %v–%v", took, err, drain, drain+margin)
		}
	case <-time.After(drain + margin):
		t.Errorf("the chain still runs %v after Stop, with a drain timeout of %v", drain+margin, drain)
		close(release)
		<-done
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("the worker was called %d times; want 1 (none after the drain timeout)", got)
	}
	// Before Close: the drain's end nacked them, not Close.
	waitFor(t, "the server has every message back", func() bool {
		st := srv.SubscriptionStats(sub)
		return st.Nacked == n && st.Backlog == n && st.Outstanding == 0
	})
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = ext.Close()
	if st := src.Stats(); st.Acked != 0 || st.Nacked != n || st.Unsettled != 0 {
		t.Errorf("client: %+v; want all %d nacked", st, n)
	}
	_ = srv.Close()
	goleak.VerifyNone(t, before)
}

// drainServer starts a server whose subscription holds n messages.
func drainServer(t *testing.T, n int) (*pubsubtest.Server, pubsubpb.SubscriberClient, string) {
	t.Helper()
	ctx := context.Background()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	topic, err := srv.CreateTopic(ctx, "drain")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "drain", Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := srv.Publish(ctx, topic, &pubsubpb.PubsubMessage{Data: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	return srv, pubsubpb.NewSubscriberClient(srv.ClientConn()), sub
}

// waitFor fails t unless cond holds within 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 20 s: %s", what)
		}
	}
}
