package suite

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow"
)

// idleFor is how long the idle test keeps a stream without traffic: past
// two heartbeats (30 s, 60 s) and the 15 s a watchdog would wait after the
// first, which is where a watchdog that expects answers used to reconnect.
const idleFor = 80 * time.Second

// TestIdleStreamStaysOpen: the emulator never answers heartbeats; an idle
// Subscriber keeps its one stream for 80 s — no reconnect, no WARN line —
// and that stream still delivers afterwards. Left out under -short.
func TestIdleStreamStaysOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the idle-stream test takes 80 s")
	}
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	sub := e.subscription(t, topic, nil)
	w := &warnings{}
	got := make(chan string, 1)
	r := e.start(t, sub, pubsubflow.SubscriberConfig{Logger: slog.New(w)}, 1, func(_ context.Context, m *pubsubflow.Message) error {
		select {
		case got <- m.ID:
		default:
		}
		return nil
	})
	time.Sleep(idleFor) // the scenario is time passing; what is asserted is below
	if st := r.sub.Stats(); st.Reconnects != 0 {
		t.Fatalf("%d reconnects on an idle stream in %v (last error: %v)", st.Reconnects, idleFor, st.LastError)
	}
	if lines := w.all(); len(lines) != 0 {
		t.Fatalf("WARN lines while idle: %q", lines)
	}
	ids := e.publish(t, topic, 1, 16)
	select {
	case id := <-got:
		if id != ids[0] {
			t.Fatalf("received %s, published %s", id, ids[0])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream that was idle delivered nothing within 30 s of a publish")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if st := r.sub.Stats(); st.Reconnects != 0 {
		t.Fatalf("%d reconnects", st.Reconnects)
	}
	if lines := w.all(); len(lines) != 0 {
		t.Fatalf("WARN lines: %q", lines)
	}
}
