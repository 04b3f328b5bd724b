package pubsubtest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
)

// newGoogleClient connects Google's client over a connection of its own
// (the client closes it), and closes the client with the test.
func newGoogleClient(t testing.TB, srv *Server) *pubsub.Client {
	t.Helper()
	ctx := context.Background()
	conn, err := srv.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pubsub.NewClient(ctx, srv.Project(), option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestGoogleClientPublishReceive(t *testing.T) {
	srv, err := NewServer(WithRecordStreamRequests())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := newGoogleClient(t, srv)
	ctx := context.Background()

	// Admin RPCs as Google's client makes them.
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: srv.topicName("topic")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: srv.subName("sub"), Topic: srv.topicName("topic"), AckDeadlineSeconds: 20,
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: srv.subName("sub")}); err != nil || got.AckDeadlineSeconds != 20 {
		t.Fatalf("GetSubscription = %v, %v", got, err)
	}

	const n = 20
	pub := c.Publisher("topic")
	var results []*pubsub.PublishResult
	for i := 0; i < n; i++ {
		results = append(results, pub.Publish(ctx, &pubsub.Message{Data: []byte(strconv.Itoa(i))}))
	}
	ids := map[string]bool{}
	for _, r := range results {
		id, err := r.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	pub.Stop()
	if len(ids) != n {
		t.Fatalf("%d distinct ids for %d messages", len(ids), n)
	}

	// Nack the first delivery of odd messages, ack everything else.
	var mu sync.Mutex
	seen := map[string]int{}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Subscriber("sub").Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			i, _ := strconv.Atoi(string(m.Data))
			mu.Lock()
			seen[m.ID]++
			k := seen[m.ID]
			mu.Unlock()
			if i%2 == 1 && k == 1 {
				m.Nack()
				return
			}
			if i == 0 {
				// Hold one message until the client's receipt modack has
				// extended its lease.
				deadline := time.Now().Add(10 * time.Second)
				for srv.SubscriptionStats("sub").ModAcks == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			m.Ack()
		})
	}()
	waitFor(t, "all acked", func() bool { return srv.SubscriptionStats("sub").Acked == n })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Receive = %v", err)
	}
	st := srv.SubscriptionStats("sub")
	if st.Nacked < n/2 || st.Redelivered < n/2 || st.Outstanding != 0 || st.Backlog != 0 || st.RejectedRequests != 0 {
		t.Errorf("stats = %+v", st)
	}
	// The client sends a receipt modack for every message it gets.
	if st.ModAcks == 0 || srv.MethodStats("ModifyAckDeadline").Calls == 0 {
		t.Errorf("modacks = %d, ModifyAckDeadline calls = %d", st.ModAcks, srv.MethodStats("ModifyAckDeadline").Calls)
	}
	for id := range ids {
		if ms := srv.MessageStats(id); ms.Acks != 1 {
			t.Errorf("message %s: %+v", id, ms)
		}
	}
	// Google's client keeps to the initial-request rule.
	for _, info := range srv.Streams("sub") {
		if info.ClientID == "" || info.ProtocolVersion != 1 || info.MaxOutstandingMessages != 1000 || info.Rejected != 0 {
			t.Errorf("stream %+v", info)
		}
		for i, req := range info.RequestLog[1:] {
			if req.Subscription != "" || req.ClientId != "" || req.MaxOutstandingMessages != 0 || req.MaxOutstandingBytes != 0 || req.ProtocolVersion != 0 {
				t.Errorf("stream %d request %d sets initial-only fields: %v", info.ID, i+1, req)
			}
		}
	}
}

type delivery struct {
	at      time.Time
	attempt int
	m       *pubsub.Message
}

// receiveInBubble runs Google's Receive on sub; the handler reports every
// delivery and acks those after the first.
func receiveInBubble(ctx context.Context, c *pubsub.Client, sub string, settings func(*pubsub.ReceiveSettings)) (<-chan delivery, <-chan error) {
	s := c.Subscriber(sub)
	settings(&s.ReceiveSettings)
	ch := make(chan delivery, 16)
	done := make(chan error, 1)
	go func() {
		done <- s.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			d := delivery{at: time.Now(), attempt: -1, m: m}
			if m.DeliveryAttempt != nil {
				d.attempt = *m.DeliveryAttempt
			}
			ch <- d
		})
	}()
	return ch, done
}

func holdThenExpire(rs *pubsub.ReceiveSettings) {
	// Lease extensions of 60 s, and the client gives up extending after 1 s:
	// the server's 60 s deadline then expires.
	rs.MinDurationPerAckExtension = 60 * time.Second
	rs.MaxDurationPerAckExtension = 60 * time.Second
	rs.MaxExtension = time.Second
}

func TestGoogleClientRedeliveryVirtualTime(t *testing.T) {
	realStart := time.Now()
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn(), WithHeartbeatDelay(time.Millisecond), WithDeliveryAttemptAlways())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		c := newGoogleClient(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mustSetup(t, srv, SubscriptionConfig{Name: "sub", Topic: "topic", AckDeadline: 60 * time.Second})
		deliveries, done := receiveInBubble(ctx, c, "sub", holdThenExpire)
		ids, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		first := <-deliveries
		second := <-deliveries
		// The 60 s deadline runs from the client's receipt modack, which
		// its 100 ms ticker sends: redelivery 60.1 s after the delivery.
		gap := second.at.Sub(first.at)
		if gap < 60*time.Second || gap > 61*time.Second {
			t.Errorf("redelivered after %v, want 60 s after the last modack", gap)
		}
		t.Logf("redelivered %v after the first delivery", gap)
		if first.attempt != 1 || second.attempt != 2 || second.m.ID != ids[0] {
			t.Errorf("attempts %d, %d; ids %s, %s", first.attempt, second.attempt, first.m.ID, second.m.ID)
		}
		first.m.Ack() // a stale ack id: ignored
		second.m.Ack()
		synctest.Wait()
		for srv.SubscriptionStats("sub").Acked == 0 {
			time.Sleep(100 * time.Millisecond) // virtual: lets the client's ack batch go out
		}
		st := srv.SubscriptionStats("sub")
		if st.Acked != 1 || st.Expired != 1 || st.Redelivered != 1 || st.Outstanding != 0 {
			t.Errorf("stats = %+v", st)
		}
		stopReceive(t, cancel, done)
	})
	if d := time.Since(realStart); d > 5*time.Second {
		t.Errorf("took %v of real time", d)
	} else {
		t.Logf("60 s of virtual time took %v of real time", d)
	}
}

func TestGoogleClientLeaseExtensionVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn(), WithHeartbeatDelay(time.Millisecond), WithDeliveryAttemptAlways())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		c := newGoogleClient(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mustSetup(t, srv, SubscriptionConfig{Name: "sub", Topic: "topic"})
		if _, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		// The default settings extend the lease by modacks while the
		// handler works for 5 minutes: no expiry, no redelivery.
		deliveries, done := receiveInBubble(ctx, c, "sub", func(*pubsub.ReceiveSettings) {})
		d := <-deliveries
		time.Sleep(5*time.Minute + 10*time.Second)
		d.m.Ack()
		for i := 0; srv.SubscriptionStats("sub").Acked == 0; i++ {
			if i == 100 {
				t.Fatalf("no ack: %+v", srv.SubscriptionStats("sub"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		st := srv.SubscriptionStats("sub")
		if st.Expired != 0 || st.Redelivered != 0 || st.ModAcks < 5 || st.Streams != 1 {
			t.Errorf("stats = %+v", st)
		}
		stopReceive(t, cancel, done)
	})
}

func TestGoogleClientExactlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn(), WithHeartbeatDelay(time.Millisecond), WithDeliveryAttemptAlways())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		c := newGoogleClient(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mustSetup(t, srv, SubscriptionConfig{Name: "sub", Topic: "topic", EnableExactlyOnceDelivery: true})
		deliveries, done := receiveInBubble(ctx, c, "sub", holdThenExpire)
		if _, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		first := <-deliveries
		second := <-deliveries
		// The first ack id expired: the server says so per ack id, and
		// Google's client reports it as an invalid ack id.
		stale, err := first.m.AckWithResult().Get(ctx)
		if stale != pubsub.AcknowledgeStatusInvalidAckID {
			t.Errorf("ack of expired id: %v, %v; want AcknowledgeStatusInvalidAckID", stale, err)
		}
		// A transient failure is retried by the client until it succeeds.
		srv.FailNextAckIDs(1, reasonTransientUnordered)
		ok, err := second.m.AckWithResult().Get(ctx)
		if ok != pubsub.AcknowledgeStatusSuccess || err != nil {
			t.Errorf("ack: %v, %v; want success", ok, err)
		}
		st := srv.SubscriptionStats("sub")
		if st.Acked != 1 || st.Expired != 1 {
			t.Errorf("stats = %+v", st)
		}
		if ms := srv.MethodStats("Acknowledge"); ms.Errors < 2 {
			t.Errorf("Acknowledge stats = %+v, want the stale and the transient failures", ms)
		}
		stopReceive(t, cancel, done)
	})
}

// stopReceive ends a Receive inside a synctest bubble. After Receive
// returns, Google's client leaves its stream keep-alive handler running
// until its next 10 s server-monitor tick: let that time pass inside the
// bubble. (The bubble tests use WithHeartbeatDelay: the client counts a
// heartbeat answered at the very instant of its ping as unanswered, and
// would replace its stream every 50 s, losing messages sent to the stream
// it drops.)
func stopReceive(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Receive = %v", err)
	}
	time.Sleep(11 * time.Second)
}

func mustSetup(t testing.TB, srv *Server, cfg SubscriptionConfig) {
	t.Helper()
	ctx := context.Background()
	if _, err := srv.CreateTopic(ctx, cfg.Topic); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CreateSubscription(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

func TestGoogleClientReconnectsAfterKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn(), WithHeartbeatDelay(time.Millisecond), WithDeliveryAttemptAlways())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		c := newGoogleClient(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mustSetup(t, srv, SubscriptionConfig{Name: "sub", Topic: "topic"})
		deliveries, done := receiveInBubble(ctx, c, "sub", func(*pubsub.ReceiveSettings) {})
		for i := 0; i < 2; i++ {
			if _, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			(<-deliveries).m.Ack()
			synctest.Wait()
			if i == 0 {
				if n := srv.KillStreams(codes.Unavailable, "injected"); n != 1 {
					t.Fatalf("KillStreams = %d", n)
				}
			}
		}
		for srv.SubscriptionStats("sub").Acked < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		infos := srv.Streams("sub")
		if len(infos) != 2 || infos[0].Code != codes.Unavailable || !infos[1].Open || infos[0].ClientID != infos[1].ClientID {
			t.Errorf("streams = %+v", infos)
		}
		stopReceive(t, cancel, done)
	})
}
