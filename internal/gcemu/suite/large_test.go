package suite

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/publisher"
)

// TestLargeMessageThroughDefaultDial: a 9 MiB message and small ones
// behind it, published with our Publisher and received with our Subscriber,
// both through the default dial (pubsubflow.Dial, as a user gets it), against
// Google's emulator: all received intact and acked. With gRPC's default
// 4 MiB receive limit the big message could never be received.
func TestLargeMessageThroughDefaultDial(t *testing.T) {
	e := newEnv(t)
	topic := e.topic(t)
	sub := e.subscription(t, topic, nil)
	ctx := bounded(t, 3*time.Minute)
	opts := pubsubflow.ConnectOptions{Endpoint: e.addr, Insecure: true}
	conn, err := pubsubflow.Dial(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub, err := publisher.New(conn, topic, publisher.Config{})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("9"), 9<<20)
	want := map[string]int{}
	id, err := pub.Publish(ctx, &publisher.Message{Data: big}).Get(ctx)
	if err != nil {
		t.Fatalf("publish 9 MiB: %v", err)
	}
	want[id] = len(big)
	for i := range 20 {
		data := fmt.Appendf(nil, "small-%d", i)
		id, err := pub.Publish(ctx, &publisher.Message{Data: data}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = len(data)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := pubsubflow.NewSubscriber(ctx, sub, pubsubflow.SubscriberConfig{Connect: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	got := map[string]int{}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- s.Run(rctx, 4, func(_ context.Context, m *pubsubflow.Message) error {
			if len(m.Data) == len(big) && !bytes.Equal(m.Data, big) {
				return fmt.Errorf("9 MiB message corrupted")
			}
			mu.Lock()
			defer mu.Unlock()
			got[m.ID] = len(m.Data)
			return nil
		})
	}()
	waitFor(t, 2*time.Minute, "every message acked", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended early: %v", err)
		default:
		}
		st := s.Stats()
		return st.Acked >= uint64(len(want)) && st.Acking == 0
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range want {
		if got[id] != n {
			t.Errorf("message %s: received %d bytes, want %d", id, got[id], n)
		}
	}
	if st := s.Stats(); st.Expired != 0 || st.Redelivered != 0 {
		t.Errorf("stats %+v: want nothing expired or redelivered", st)
	}
}
