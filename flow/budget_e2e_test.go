package flow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// peak records the most a FlowControl was seen holding.
type peak struct {
	fc  *FlowControl
	max atomic.Int64
}

func (p *peak) see() {
	for n := p.fc.Outstanding(); ; {
		m := p.max.Load()
		if n <= m || p.max.CompareAndSwap(m, n) {
			return
		}
	}
}

// slowAck is a handler of 4 workers that look at the budgets, wait d
// and ack.
func slowAck(d time.Duration, peaks ...*peak) stage.Flow[*source.Message, *source.Message] {
	return operators.ParallelMap(4, func(ctx context.Context, m *source.Message) (*source.Message, error) {
		for _, p := range peaks {
			p.see()
		}
		select {
		case <-time.After(d):
			m.Ack()
		case <-ctx.Done():
		}
		return m, nil
	})
}

// waitUntil polls cond every 5 ms until it holds, or fails the test after
// limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTwoGatesEachBoundHolds: EagerTrack, FlowGate(limit 1000), then
// FlowGate(limit 20), over a backlog of 400 on pubsubtest over gRPC.
// Each budget holds in its Stats, and with both gates fused the stream
// asks the server for the least room (20), so the server never has more
// than 20 out. With the second gate standalone behind a stage that does
// not fuse, it holds its own bound as a stage.
func TestTwoGatesEachBoundHolds(t *testing.T) {
	pass := func() stage.Flow[*source.Message, *source.Message] {
		return pipeline.Filter(func(*source.Message) bool { return true }, func(m *source.Message) { m.Nack() })
	}
	for name, c := range map[string]struct {
		chain     func(ext *Extender, a, b *FlowControl) []stage.Flow[*source.Message, *source.Message]
		serverMax int64
	}{
		"fused": {func(ext *Extender, a, b *FlowControl) []stage.Flow[*source.Message, *source.Message] {
			return []stage.Flow[*source.Message, *source.Message]{EagerTrack(ext, 0), FlowGate(a), FlowGate(b)}
		}, 20},
		"second standalone": {func(ext *Extender, a, b *FlowControl) []stage.Flow[*source.Message, *source.Message] {
			return []stage.Flow[*source.Message, *source.Message]{EagerTrack(ext, 0), FlowGate(a), pass(), FlowGate(b)}
		}, 1000},
	} {
		t.Run(name, func(t *testing.T) {
			const n = 400
			f := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{})
			f.Backlog(t, n)
			ext := trkExtender(t, f.Subscriber, ExtenderConfig{})
			fcA, fcB := NewFlowControl(1000, Unlimited), NewFlowControl(20, Unlimited)
			pa, pb := &peak{fc: fcA}, &peak{fc: fcB}
			src, err := source.Subscribe(f.Subscriber, source.Config{Subscription: f.Sub})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close(context.Background())
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				done <- pipeline.FromContext(ctx, src).Via(c.chain(ext, fcA, fcB)...).Via(slowAck(2*time.Millisecond, pa, pb)).To(trkDiscard())
			}()
			waitUntil(t, 30*time.Second, "all acked", func() bool { return f.Server.SubscriptionStats(f.Sub).Acked == n })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("pipeline: %v", err)
			}
			if got := pb.max.Load(); got > 20 {
				t.Errorf("the second gate (limit 20) was seen holding %d", got)
			}
			if got := pa.max.Load(); got > 1000 {
				t.Errorf("the first gate (limit 1000) was seen holding %d", got)
			}
			st := f.Server.SubscriptionStats(f.Sub)
			if st.MaxOutstanding > c.serverMax {
				t.Errorf("the server had %d out on a stream at once; want at most %d", st.MaxOutstanding, c.serverMax)
			}
			for _, s := range f.Server.Streams(f.Sub) {
				if s.MaxOutstandingMessages > c.serverMax {
					t.Errorf("a stream asked the server for %d messages; want at most %d", s.MaxOutstandingMessages, c.serverMax)
				}
			}
			for _, fc := range []*FlowControl{fcA, fcB} {
				if s := fc.Stats(); s.Outstanding != 0 || s.Acquired != s.Released || s.Acquired < n {
					t.Errorf("Stats at the end: %+v; want 0 outstanding, every one of %d released", s, n)
				}
			}
		})
	}
}
