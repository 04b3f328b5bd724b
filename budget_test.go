package pubsubflow

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// TestBudgetHoldsAcrossReconnects: a stalled handler, the budget full, and
// every stream killed every 100 ms for 8 s. The server never has more
// messages (or bytes) outstanding for the subscription than the budget —
// a reconnecting stream asks only for the room left, and none opens while
// there is none — and Stats().Outstanding equals the server's count at
// every sample. Then the handler is released and every message is acked
// exactly once.
func TestBudgetHoldsAcrossReconnects(t *testing.T) {
	const payload = 200
	cases := []struct {
		name    string
		streams int
		cfg     SubscriberConfig
		bytes   bool // the budget is in bytes
	}{
		{"messages/1 stream", 1, SubscriberConfig{MaxOutstandingMessages: 100}, false},
		{"messages/4 streams", 4, SubscriberConfig{MaxOutstandingMessages: 100, Streams: 4}, false},
		{"bytes/2 streams", 2, SubscriberConfig{MaxOutstandingMessages: Unlimited, Streams: 2}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, pubsubtest.WithBufconn(), pubsubtest.WithMaxMessagesPerResponse(30))
				ids := publishSized(t, e, 600, payload)
				cfg := tc.cfg
				var limit int64 = 100
				if tc.bytes {
					limit = 40 * payload
					cfg.MaxOutstandingBytes = limit
				}
				cfg.StreamAckDeadline = 10 * time.Second
				s := e.subscriber(t, cfg)
				release := make(chan struct{})
				acks := map[string]int{}
				ackCh := make(chan string, len(ids))
				ctx, cancel := context.WithCancel(context.Background())
				done := runAsync(ctx, s, 8, func(ctx context.Context, m *Message) error {
					select {
					case <-release:
					case <-ctx.Done():
						return ctx.Err()
					}
					ackCh <- m.ID
					return nil
				})
				held := func() (server, client int64) {
					ss := e.srv.SubscriptionStats(e.sub)
					st := s.Stats()
					if tc.bytes {
						return ss.OutstandingBytes, st.OutstandingBytes
					}
					return ss.Outstanding, st.Outstanding
				}
				time.Sleep(time.Second) // let the first budget arrive
				synctest.Wait()
				if srv, _ := held(); srv < limit/2 {
					t.Fatalf("the budget never filled: %d of %d outstanding", srv, limit)
				}
				kills := 0
				for range 80 { // 8 s
					time.Sleep(100 * time.Millisecond)
					kills += e.srv.KillStreams(codes.Unavailable, "test: flaky network")
					synctest.Wait()
					srv, cl := held()
					if srv > limit {
						t.Fatalf("after %d kills the server has %d outstanding for the subscription, budget %d", kills, srv, limit)
					}
					if cl != srv {
						t.Fatalf("after %d kills Stats says %d outstanding, the server %d", kills, cl, srv)
					}
				}
				if kills == 0 {
					t.Fatal("no stream was ever open to kill")
				}
				close(release)
				waitFor(t, "every message acked", 5*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == int64(len(ids)) })
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				close(ackCh)
				for id := range ackCh {
					acks[id]++
				}
				for _, id := range ids {
					if acks[id] != 1 {
						t.Fatalf("message %s handled %d times", id, acks[id])
					}
				}
				if ss := e.srv.SubscriptionStats(e.sub); ss.Redelivered != 0 || ss.Expired != 0 {
					t.Fatalf("%d redeliveries, %d expirations: %+v", ss.Redelivered, ss.Expired, ss)
				}
			})
		})
	}
}

// publishSized publishes n messages of payload bytes each (the same
// encoded size, so a byte budget is a whole number of messages).
func publishSized(t testing.TB, e *env, n, payload int) []string {
	t.Helper()
	var msgs []*pubsubpb.PubsubMessage
	for i := range n {
		data := fmt.Sprintf("%06d", i) + strings.Repeat("x", payload-6)
		msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte(data)})
	}
	ids, err := e.srv.Publish(context.Background(), e.topic, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
