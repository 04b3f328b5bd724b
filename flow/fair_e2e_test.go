package flow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

// fairSub is one subscription's pipeline in TestSharedFlowControlIsFair.
type fairSub struct {
	name    string
	started time.Time
	first   atomic.Int64 // unix nanos of the first message handled; 0: none yet
	handled atomic.Int64
	done    chan error
}

// run starts the subscription's pipeline: EagerTrack and a FlowGate on fc
// fused into the source, then a consumer of 2 workers taking 10 ms a
// message.
func (fs *fairSub) run(ctx context.Context, t *testing.T, f *pubsubtest.Fixture, ext *Extender, fc *FlowControl) {
	src, err := source.Subscribe(f.Subscriber, source.Config{Subscription: fs.name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	fs.started, fs.done = time.Now(), make(chan error, 1)
	consume := operators.ParallelMap(2, func(ctx context.Context, m *source.Message) (*source.Message, error) {
		fs.first.CompareAndSwap(0, time.Now().UnixNano())
		select {
		case <-time.After(10 * time.Millisecond):
			m.Ack()
			fs.handled.Add(1)
		case <-ctx.Done():
		}
		return m, nil
	})
	go func() {
		fs.done <- pipeline.FromContext(ctx, src).Via(EagerTrack(ext, 0), FlowGate(fc)).Via(consume).To(trkDiscard())
	}()
}

// waited is how long the subscription waited for its first message.
func (fs *fairSub) waited() time.Duration {
	if n := fs.first.Load(); n != 0 {
		return time.Unix(0, n).Sub(fs.started)
	}
	return time.Since(fs.started)
}

// fairSampler checks, every millisecond, that the shared budget holds in
// the FlowControl's Stats and at the server: what both subscriptions have
// outstanding, and what their open streams were granted, stay within it.
func fairSampler(ctx context.Context, t *testing.T, f *pubsubtest.Fixture, fc *FlowControl, limit int64, subs ...string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if st := fc.Stats(); st.Outstanding > limit || st.ServerHeld > limit {
				t.Errorf("FlowControl Stats %+v past the budget %d", st, limit)
				return
			}
			var out, granted int64
			for _, sub := range subs {
				out += f.Server.SubscriptionStats(sub).Outstanding
				for _, s := range f.Server.Streams(sub) {
					if s.Open {
						granted += s.MaxOutstandingMessages
					}
				}
			}
			if out > limit || granted > limit {
				t.Errorf("the server has %d outstanding on both subscriptions and their open streams were granted %d; budget %d", out, granted, limit)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return done
}

// TestSharedFlowControlIsFair: one FlowControl (50 messages) shared by the
// sources of two subscriptions with 400 messages each, on one pubsubtest
// server over gRPC, in virtual time. Whether the second subscription
// starts with the first, while the first is busy, or once the first has
// drained (its stream idle, holding its grant), it has its first message
// within 1 s; both drain; and the budget holds at every sample, in Stats
// and at the server.
func TestSharedFlowControlIsFair(t *testing.T) {
	for name, startB := range map[string]func(a *fairSub) bool{
		"together":  func(*fairSub) bool { return true },
		"a busy":    func(a *fairSub) bool { return a.handled.Load() >= 50 },
		"a drained": func(a *fairSub) bool { return a.handled.Load() == 400 },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testSharedFair(t, name, startB) })
		})
	}
}

func testSharedFair(t *testing.T, name string, startB func(a *fairSub) bool) {
	const n, limit = 400, 50
	f := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{}, pubsubtest.WithBufconn())
	sub2, err := f.Server.CreateSubscription(context.Background(), pubsubtest.SubscriptionConfig{Name: "sub2", Topic: f.Topic})
	if err != nil {
		t.Fatal(err)
	}
	f.Backlog(t, n) // 400 for each subscription
	ext := trkExtender(t, f.Subscriber, ExtenderConfig{})
	fc := NewFlowControl(limit, Unlimited)
	ctx, cancel := context.WithCancel(t.Context())
	sampled := fairSampler(ctx, t, f, fc, limit, f.Sub, sub2)
	a, b := &fairSub{name: f.Sub}, &fairSub{name: sub2}
	defer func() { // a failed wait ends the test too: end what runs first
		cancel()
		<-sampled
		for _, s := range []*fairSub{a, b} {
			if s.done != nil {
				<-s.done
			}
		}
	}()
	a.run(ctx, t, f, ext, fc)
	waitUntil(t, 60*time.Second, "subscription A at the point B starts", func() bool { return startB(a) })
	b.run(ctx, t, f, ext, fc)
	waitUntil(t, 10*time.Second, "both subscriptions' first message", func() bool { return a.first.Load() != 0 && b.first.Load() != 0 })
	for _, s := range []*fairSub{a, b} {
		t.Logf("%s waited %v for its first message", s.name, s.waited())
		if w := s.waited(); w > time.Second {
			t.Errorf("%s: %s waited %v for its first message; want at most 1 s", name, s.name, w)
		}
	}
	if name == "a busy" && a.handled.Load() == n {
		t.Errorf("A had drained by B's first message: the test did not test B starting while A is busy")
	}
	waitUntil(t, 120*time.Second, "both drained", func() bool {
		return f.Server.SubscriptionStats(f.Sub).Acked == n && f.Server.SubscriptionStats(sub2).Acked == n
	})
	cancel()
	for _, s := range []*fairSub{a, b} {
		if err := <-s.done; !errors.Is(err, context.Canceled) {
			t.Errorf("%s's pipeline: %v", s.name, err)
		}
		s.done = nil
	}
	if s := fc.Stats(); s.Outstanding != 0 || s.Acquired != s.Released || s.Acquired < 2*n {
		t.Errorf("Stats at the end: %+v; want 0 outstanding, every one of %d released", s, 2*n)
	}
}
