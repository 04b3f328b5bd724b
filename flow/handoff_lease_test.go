package flow

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestRunWaitFollowsExtendedLease: two sources on two connections to one
// server and one subscription share an Extender and a FlowControl, each
// with EagerTrack and FlowGate fused, and hand on one message at a time
// (Source.Run). Downstream takes nothing for three lease periods (10 s
// deadline) while every extension succeeds: no message is expired, and
// each is then handed on unsettled and its ack applied. Before the fix the
// wait in Source.Run expired the message it held when the lapse it had
// read when it started waiting came, though the Extender had moved the
// lease on since: counted as settled (Expired), with nothing sent, while
// the server still held it for the extension's time.
func TestRunWaitFollowsExtendedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, deadline = 4, 10 * time.Second
		fix := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{Name: "sub", AckDeadline: deadline}, pubsubtest.WithBufconn())
		cc, err := fix.Server.Dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cc.Close() }()
		ext := trkExtender(t, fix.Subscriber, ExtenderConfig{StreamAckDeadline: deadline})
		fc := NewFlowControl(n, 0)
		g := stage.NewGroup(context.Background())
		var srcs []*source.Source
		var outs []<-chan *source.Message
		for _, c := range []pubsubpb.SubscriberClient{fix.Subscriber, pubsubpb.NewSubscriberClient(cc)} {
			src, err := source.Subscribe(c, source.Config{Subscription: fix.Sub, StreamAckDeadline: deadline, Streams: 1})
			if err != nil {
				t.Fatal(err)
			}
			srcs = append(srcs, src)
			var s stage.Source[*source.Message] = src
			s, _ = s.(stage.Fuser[*source.Message]).Fuse(EagerTrack(ext, 0))
			s, _ = s.(stage.Fuser[*source.Message]).Fuse(FlowGate(fc))
			outs = append(outs, s.Run(g))
		}
		fix.Backlog(t, n)
		stats := func() pubsubtest.SubStats { return fix.Server.SubscriptionStats(fix.Sub) }
		waitFor(t, time.Minute, func() bool { return stats().Delivered == n }, func() string {
			return fmt.Sprintf("server: %+v, want %d delivered", stats(), n)
		})
		time.Sleep(3 * deadline) // downstream takes nothing meanwhile
		synctest.Wait()
		var expired uint64
		for _, src := range srcs {
			expired += src.Stats().Expired
		}
		if st := stats(); expired != 0 || st.Redelivered != 0 || st.Expired != 0 || ext.Stats().Expired != 0 {
			t.Fatalf("after %v held in Source.Run: the sources counted %d expired, the Extender %d; server %+v; want none expired or redelivered", 3*deadline, expired, ext.Stats().Expired, st)
		}
		runWaitTakeAll(t, outs, n)
		waitFor(t, time.Minute, func() bool { return stats().Acked == n }, func() string {
			return fmt.Sprintf("server: %+v, want %d acked", stats(), n)
		})
		g.Cancel()
		_ = g.Wait()
		for _, src := range srcs {
			if err := src.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// runWaitTakeAll takes n messages from outs, each unsettled, and acks
// them.
func runWaitTakeAll(t *testing.T, outs []<-chan *source.Message, n int) {
	t.Helper()
	limit := time.After(time.Minute)
	for got := 0; got < n; got++ {
		var m *source.Message
		select {
		case m = <-outs[0]:
		case m = <-outs[1]:
		case <-limit:
			t.Fatalf("%d of %d messages handed on in a minute", got, n)
		}
		if m.Settled() || !m.Ack() {
			t.Fatalf("message %s handed on settled (outcome %v)", m.ID, m.Outcome())
		}
	}
}
