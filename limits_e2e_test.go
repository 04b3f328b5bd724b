package pubsubflow

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/publisher"
)

// TestLargeMessageThroughDefaultDial: a 9 MiB message and small ones
// behind it, published and received through the default dial
// (Dial, as a user gets it) against pubsubtest over loopback TCP,
// are all received intact and acked.
func TestLargeMessageThroughDefaultDial(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := ConnectOptions{Endpoint: e.srv.Addr(), Insecure: true}
	conn, err := Dial(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub, err := publisher.New(conn, e.topic, publisher.Config{})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("9"), 9<<20)
	const small = 20
	want := map[string]int{}
	r := pub.Publish(ctx, &publisher.Message{Data: big})
	id, err := r.Get(ctx)
	if err != nil {
		t.Fatalf("publish 9 MiB: %v", err)
	}
	want[id] = len(big)
	for i := range small {
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

	sub, err := NewSubscriber(ctx, e.sub, SubscriberConfig{Connect: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var mu sync.Mutex
	got := map[string]int{}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := runAsync(rctx, sub, 4, func(_ context.Context, m *Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.ID] = len(m.Data)
		if len(m.Data) == len(big) && !bytes.Equal(m.Data, big) {
			return fmt.Errorf("9 MiB message corrupted")
		}
		return nil
	})
	waitFor(t, "all acked", 50*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == int64(len(want)) })
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
	if st := e.srv.SubscriptionStats(e.sub); st.Expired != 0 || st.Redelivered != 0 {
		t.Errorf("server stats %+v: want nothing expired or redelivered", st)
	}
}

// TestReceiveOverCallersLimitIsTerminal: with the caller's own connection
// at gRPC's default 4 MiB receive limit, a 9 MiB message cannot be
// received: Run ends with RESOURCE_EXHAUSTED instead of retrying forever.
func TestReceiveOverCallersLimitIsTerminal(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.srv.Publish(ctx, e.topic, pbMsg(make([]byte, 9<<20))); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(e.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sub, err := NewSubscriber(ctx, e.sub, SubscriberConfig{Conn: cc})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	done := runAsync(ctx, sub, 1, func(context.Context, *Message) error { return nil })
	select {
	case err := <-done:
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("Run = %v, want RESOURCE_EXHAUSTED", err)
		}
	case <-ctx.Done():
		t.Fatal("Run kept retrying a message over the connection's receive limit")
	}
}

func pbMsg(data []byte) *pubsubpb.PubsubMessage { return &pubsubpb.PubsubMessage{Data: data} }
