package flow

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestTrackerOnReceive: the hook runs on receipt for every message the
// stage received, before the message is tracked, even while downstream is
// blocked (5 buffered + 1 in the handler).
func TestTrackerOnReceive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ext := trkExtender(t, &trkStub{}, "projects/p/subscriptions/s", ExtenderConfig{})
		var hooked, untrackedAtHook atomic.Int64
		tr := &Tracker{Extender: ext, MaxBuffer: 5, OnReceive: func(m *message.Message) {
			hooked.Add(1)
			for _, l := range ext.Leased() {
				if l == m {
					return
				}
			}
			untrackedAtHook.Add(1)
		}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, pipeline.Slice(trkMessages(100, nil)...)).Via(tr, trkBlocked()).To(trkDiscard())
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		if hooked.Load() != 6 || untrackedAtHook.Load() != 6 || ext.Len() != 6 {
			t.Fatalf("hook ran %d times (%d before tracking), %d tracked; want 6, 6, 6", hooked.Load(), untrackedAtHook.Load(), ext.Len())
		}
		cancel()
		<-done
	})
}

// TestGateHandOff: HandOff is asked once per message, in order, just
// before the gate offers it; a message it refuses (settling it) is not
// emitted and its permits return, so the budget ends at zero.
func TestGateHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(5, 0)
		rel := &releaser{fc: fc}
		g := stage.NewGroup(t.Context())
		var sent atomic.Int64
		asked := map[*message.Message]int{}
		var order []string
		gate := &Gate{Flow: fc, HandOff: func(m *message.Message) bool {
			asked[m]++
			order = append(order, m.ID)
			if len(order)%3 == 0 {
				m.Nack() // refused: settled by the hook
				return false
			}
			return true
		}}
		out := gate.Run(g, produce(g, 30, 10, rel, &sent))
		var got []*message.Message
		for m := range out {
			if m.Settled() {
				t.Fatalf("message %s emitted after HandOff settled it", m.ID)
			}
			got = append(got, m)
			m.Ack()
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 20 || len(order) != 30 {
			t.Fatalf("emitted %d, asked %d; want 20 and 30", len(got), len(order))
		}
		for m, n := range asked {
			if n != 1 {
				t.Fatalf("HandOff asked %d times for %s", n, m.ID)
			}
		}
		for i, id := range order {
			if want := newMsg(i, 10).ID; id != want {
				t.Fatalf("asked %s at %d, want %s", id, i, want)
			}
		}
		if st := fc.Stats(); st.Outstanding != 0 || st.Acquired != 30 || st.Released != 30 {
			t.Fatalf("budget after the run: %+v", st)
		}
	})
}
