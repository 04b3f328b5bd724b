package pubsubflow

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// TestBudgetHoldsAcrossReconnects: a stalled handler, the budget full, and
// every stream killed every 100 ms for 8 s. The server has exactly the
// budget outstanding for the subscription at every sample (for bytes: no
// room in any stream's share for one more message), never more —
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
				// full reports whether the budget is spent: all of it, or
				// for bytes no room left in any stream's share for one
				// more message (a share cannot hold part of one; the
				// messages' sizes differ by the digits of their ids and
				// publish times, a few bytes).
				full := func(srv int64) bool {
					if !tc.bytes {
						return srv == limit
					}
					ss := e.srv.SubscriptionStats(e.sub)
					if ss.Outstanding == 0 || srv > limit {
						return false
					}
					largest := ss.OutstandingBytes/ss.Outstanding + 8
					return limit-srv < int64(tc.streams)*largest
				}
				time.Sleep(time.Second) // let the first budget arrive
				synctest.Wait()
				if srv, _ := held(); !full(srv) {
					t.Fatalf("the budget never filled: %d of %d outstanding", srv, limit)
				}
				kills := 0
				for range 80 { // 8 s
					time.Sleep(100 * time.Millisecond)
					kills += e.srv.KillStreams(codes.Unavailable, "test: flaky network")
					synctest.Wait()
					// Nothing is released while the handler holds every
					// message, so the budget stays spent, never exceeded.
					srv, cl := held()
					if !full(srv) {
						t.Fatalf("after %d kills the server has %d outstanding for the subscription, want the budget %d spent whole", kills, srv, limit)
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

// TestProcessingCountsHandlersOnly: with N workers stuck in their
// handlers, Stats().Processing is exactly N — messages waiting for a worker
// (in the hand-off or in ParallelMap's queue) are Buffered — and
// Buffered + Processing = Outstanding = received − settled.
func TestProcessingCountsHandlersOnly(t *testing.T) {
	for _, n := range []int{1, 5, 10} {
		t.Run(fmt.Sprint(n, " workers"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, pubsubtest.WithBufconn(), pubsubtest.WithMaxMessagesPerResponse(7))
				e.publish(t, 100, nil)
				s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 40})
				release := make(chan struct{})
				ctx, cancel := context.WithCancel(context.Background())
				done := runAsync(ctx, s, n, func(ctx context.Context, m *Message) error {
					select {
					case <-release:
					case <-ctx.Done():
					}
					return nil
				})
				time.Sleep(time.Second)
				synctest.Wait()
				st := s.Stats()
				if st.Processing != int64(n) || st.Buffered != 40-int64(n) || st.Outstanding != 40 {
					t.Fatalf("%d handlers stuck: processing %d (want %d), buffered %d (want %d), outstanding %d (want 40)",
						n, st.Processing, n, st.Buffered, 40-n, st.Outstanding)
				}
				if held := int64(st.Received) - int64(st.Acked+st.Nacked+st.NoOps+st.Expired+st.AckRefused); held != st.Buffered+st.Processing {
					t.Fatalf("received − settled = %d, buffered + processing = %d", held, st.Buffered+st.Processing)
				}
				close(release)
				waitFor(t, "every message acked", time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 100 })
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestKillsWithBatchesInFlight: streams killed every 50 ms while batches
// are between the streams and the workers: every message is acked exactly
// once by the handler or redelivered after a nack — none lost, none leased
// forever (nothing left outstanding or leased at the end).
func TestKillsWithBatchesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn(), pubsubtest.WithMaxMessagesPerResponse(25))
		ids := e.publish(t, 2000, nil)
		s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 200, Streams: 3, StreamAckDeadline: 10 * time.Second})
		var mu sync.Mutex
		handled := map[string]int{}
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 4, func(ctx context.Context, m *Message) error {
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			handled[m.ID]++
			mu.Unlock()
			return nil
		})
		kills := 0
		for e.srv.SubscriptionStats(e.sub).Acked < int64(len(ids)) {
			time.Sleep(50 * time.Millisecond)
			kills += e.srv.KillStreams(codes.Unavailable, "test: kill")
			if kills > 10000 {
				t.Fatalf("not all acked after %d kills: %+v", kills, e.srv.SubscriptionStats(e.sub))
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if kills < 10 {
			t.Fatalf("only %d kills: the test did not exercise reconnects", kills)
		}
		ss := e.srv.SubscriptionStats(e.sub)
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if handled[id] != 1 {
				t.Fatalf("message %s handled %d times (server: %+v)", id, handled[id], ss)
			}
		}
		if ss.Redelivered != 0 || ss.Expired != 0 || ss.Outstanding != 0 {
			t.Fatalf("after the run: %+v", ss)
		}
		if st := s.Stats(); st.Outstanding != 0 || st.Leases != 0 || st.Buffered != 0 || st.Processing != 0 {
			t.Fatalf("after the run: %+v", st)
		}
	})
}

// TestOversizeOnEveryStreamIsRead: three streams share a 2,000-byte
// budget, and each is sent one 5,000-byte message (the service sends a
// message larger than a stream's byte grant alone). The first spends the
// budget; the other two come after a heartbeat answer brought their
// streams back from Recv. They are read and leased at once, whatever the
// budget says: a stream that stopped reading at the budget would leave
// them unread in the transport while the server's deadline ran, and the
// server would redeliver them. With the handlers held for three ack
// deadlines, nothing expires and nothing is redelivered.
func TestOversizeOnEveryStreamIsRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		s := e.subscriber(t, SubscriberConfig{
			Streams: 3, MaxOutstandingMessages: Unlimited, MaxOutstandingBytes: 2000,
			StreamAckDeadline: 10 * time.Second, HeartbeatInterval: time.Second,
		})
		release := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 3, func(context.Context, *Message) error {
			<-release
			return nil
		})
		waitFor(t, "three streams open", time.Second, func() bool { return openStreams(e) == 3 })
		publishSized(t, e, 1, 5000)
		waitFor(t, "the first message read", time.Second, func() bool { return s.Stats().Received == 1 })
		waitFor(t, "a heartbeat answered on every stream", 3*time.Second, func() bool {
			for _, st := range e.srv.Streams(e.sub) {
				if st.HeartbeatReplies == 0 {
					return false
				}
			}
			return true
		})
		publishSized(t, e, 2, 5000)
		waitFor(t, "all three messages read", time.Second, func() bool { return s.Stats().Received == 3 })
		time.Sleep(30 * time.Second) // three ack deadlines, in virtual time
		if ss, st := e.srv.SubscriptionStats(e.sub), s.Stats(); ss.Expired != 0 || ss.Redelivered != 0 || st.Received != 3 || st.Processing != 3 {
			t.Fatalf("server %+v, client %+v: want 3 received and held, none expired or redelivered", ss, st)
		}
		close(release)
		waitFor(t, "all acked", 5*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 3 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// openStreams counts the subscription's open streams.
func openStreams(e *env) int {
	n := 0
	for _, st := range e.srv.Streams(e.sub) {
		if st.Open {
			n++
		}
	}
	return n
}
