package pubsubtest

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// TestGoogleClientBacklogBound fills a server bounded to 64 KiB through
// Google's client: Publish fails with RESOURCE_EXHAUSTED past the bound,
// every message accepted before is delivered, and acknowledging makes room
// again, except where acknowledged messages are retained for Seek, which
// count against the bound too.
func TestGoogleClientBacklogBound(t *testing.T) {
	const bound = 64 << 10
	srv, err := NewServer(WithMaxBacklogBytes(bound))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newAdmin(t, srv)
	ctx := context.Background()
	a.topic("topic", 0)
	a.subscription("sub", "topic", false)
	payload := bytes.Repeat([]byte("x"), 1000)
	// Google's client retries RESOURCE_EXHAUSTED on Publish; ask it not to,
	// to see the server's answer.
	publish := func() (string, error) {
		resp, err := a.top.Publish(ctx, &pubsubpb.PublishRequest{
			Topic: srv.topicName("topic"), Messages: []*pubsubpb.PubsubMessage{{Data: payload}},
		}, gax.WithRetry(func() gax.Retryer { return nil }))
		if err != nil {
			return "", err
		}
		return resp.MessageIds[0], nil
	}
	fill := func() map[string]bool {
		t.Helper()
		accepted := map[string]bool{}
		for i := 0; ; i++ {
			id, err := publish()
			if err != nil {
				wantCode(t, "Publish past the bound", err, codes.ResourceExhausted, "bound")
				break
			}
			accepted[id] = true
			if i > bound/len(payload) {
				t.Fatalf("%d messages of %d bytes accepted under a bound of %d bytes", len(accepted), len(payload), bound)
			}
		}
		if len(accepted) < bound/(len(payload)+heldOverhead+100) {
			t.Fatalf("only %d messages accepted", len(accepted))
		}
		return accepted
	}
	drain := func(sub string, accepted map[string]bool) {
		t.Helper()
		ms := a.pull(sub)
		a.ack(sub, ms)
		got := map[string]bool{}
		for _, m := range ms {
			got[m.Message.MessageId] = true
		}
		for id := range accepted {
			if !got[id] {
				t.Errorf("%s: accepted message %s was not delivered", sub, id)
			}
		}
		if len(got) != len(accepted) {
			t.Errorf("%s: %d delivered, %d accepted", sub, len(got), len(accepted))
		}
	}

	accepted := fill()
	t.Logf("%d messages of %d bytes accepted under %d bytes", len(accepted), len(payload), bound)
	if st := srv.SubscriptionStats("sub"); st.HeldBytes > bound || st.HeldBytes < bound-2*(int64(len(payload))+heldOverhead+100) {
		t.Errorf("held %d bytes at the bound %d", st.HeldBytes, bound)
	}
	drain("sub", accepted)
	if st := srv.SubscriptionStats("sub"); st.HeldBytes != 0 {
		t.Errorf("after acknowledging everything: %d bytes held", st.HeldBytes)
	}
	if _, err := publish(); err != nil {
		t.Fatalf("Publish after acknowledging: %v", err)
	}
	a.pullAck("sub")

	// Retained acknowledged messages stay held: acking makes no room.
	if _, err := a.sub.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: srv.subName("sub"), RetainAckedMessages: true},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"retain_acked_messages"}},
	}); err != nil {
		t.Fatal(err)
	}
	drain("sub", fill())
	if _, err := publish(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Publish with the bound full of retained messages: %v, want RESOURCE_EXHAUSTED", err)
	}
	// No longer retaining them makes the room.
	if _, err := a.sub.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: srv.subName("sub")},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"retain_acked_messages"}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := publish(); err != nil {
		t.Fatalf("Publish after dropping the retained messages: %v", err)
	}
	if ms := srv.MethodStats("Publish"); ms.Errors != 3 {
		t.Errorf("Publish stats %+v, want 3 refusals", ms)
	}
}

// TestMessageStatsLimit: with a limit, the per-message counters of old
// messages are forgotten, so that they take bounded memory.
func TestMessageStatsLimit(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{}, WithMessageStatsLimit(3))
	var ids []string
	for i := 0; i < 10; i++ {
		ids = append(ids, f.publish(t, 1, "")...)
		f.srv.mu.Lock()
		n := len(f.srv.msgStats)
		f.srv.mu.Unlock()
		if n > 6 {
			t.Fatalf("%d counters kept under a limit of 3", n)
		}
	}
	msgs, err := f.sub.Pull(context.Background(), &pubsubpb.PullRequest{Subscription: f.subn, MaxMessages: 10})
	if err != nil || len(msgs.ReceivedMessages) != 10 {
		t.Fatalf("Pull = %d messages, %v", len(msgs.GetReceivedMessages()), err)
	}
	if ms := f.srv.MessageStats(ids[0]); ms.Deliveries != 0 {
		t.Errorf("first message: %+v, want forgotten", ms)
	}
	if ms := f.srv.MessageStats(ids[9]); ms.Deliveries != 1 {
		t.Errorf("last message: %+v, want 1 delivery", ms)
	}
	if ids[9] != "10" {
		t.Errorf("ids %v, want 1…10", ids)
	}
}

// TestGoogleClientDetachReleases: a detached subscription drops its
// messages, so they no longer count against the bound.
func TestGoogleClientDetachReleases(t *testing.T) {
	srv, err := NewServer(WithMaxBacklogBytes(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newAdmin(t, srv)
	a.topic("topic", 0)
	a.subscription("sub", "topic", true)
	a.publish("topic", "a", "b", "c")
	a.ack("sub", a.pull("sub")[:1]) // a retained, b and c outstanding
	if st := srv.SubscriptionStats("sub"); st.HeldBytes == 0 || st.Outstanding != 2 {
		t.Fatalf("before detaching: %+v", st)
	}
	if _, err := a.top.DetachSubscription(context.Background(), &pubsubpb.DetachSubscriptionRequest{Subscription: srv.subName("sub")}); err != nil {
		t.Fatal(err)
	}
	if st := srv.SubscriptionStats("sub"); st.HeldBytes != 0 || st.Outstanding != 0 || st.Backlog != 0 {
		t.Errorf("after detaching: %+v", st)
	}
	srv.mu.Lock()
	held, leases := srv.feat.heldBytes, len(srv.leases)
	srv.mu.Unlock()
	if held != 0 || leases != 0 {
		t.Errorf("server holds %d bytes, %d leases", held, leases)
	}
}

// TestBoundPrunesExpiredVirtualTime: what is past its time no longer
// counts against the bound, even when nothing else has pruned it yet:
// acknowledged messages retained by the subscription and the topic, an
// unacknowledged message past its subscription's retention, an expired
// snapshot.
func TestBoundPrunesExpiredVirtualTime(t *testing.T) {
	const bound = 16 << 10
	payload := bytes.Repeat([]byte("x"), 1000)
	// setup makes a bounded server whose topic t retains messages for an
	// hour (when topicRetention) and, unless topicRetention, has a
	// subscription s that retains them for an hour (when retainAcked), and
	// fills it; it returns what s received.
	setup := func(t *testing.T, topicRetention, retainAcked bool) (*Server, pubsubpb.SubscriberClient, []*pubsubpb.ReceivedMessage) {
		srv, err := NewServer(WithBufconn(), WithMaxBacklogBytes(bound))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		ctx := context.Background()
		tp := &pubsubpb.Topic{Name: srv.topicName("topic")}
		if topicRetention {
			tp.MessageRetentionDuration = durationpb.New(time.Hour)
		}
		if _, err := srv.rpc().CreateTopic(ctx, tp); err != nil {
			t.Fatal(err)
		}
		if !topicRetention {
			if _, err := srv.CreateSubscription(ctx, SubscriptionConfig{Name: "sub", Topic: "topic", RetainAckedMessages: retainAcked, Retention: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		for ; ; n++ {
			if _, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: payload}); status.Code(err) == codes.ResourceExhausted {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		client := pubsubpb.NewSubscriberClient(srv.ClientConn())
		if topicRetention {
			return srv, client, nil
		}
		resp, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: srv.subName("sub"), MaxMessages: 100})
		if err != nil || len(resp.ReceivedMessages) != n {
			t.Fatalf("Pull = %d of %d, %v", len(resp.GetReceivedMessages()), n, err)
		}
		return srv, client, resp.ReceivedMessages
	}
	publish := func(srv *Server) error {
		_, err := srv.Publish(context.Background(), "topic", &pubsubpb.PubsubMessage{Data: payload})
		return err
	}
	ack := func(t *testing.T, srv *Server, client pubsubpb.SubscriberClient, ms []*pubsubpb.ReceivedMessage) {
		if _, err := client.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: srv.subName("sub"), AckIds: ackIDs(ms)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name                        string
		topicRetention, retainAcked bool
	}{{"retained by the subscription", false, true}, {"retained by the topic", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, client, ms := setup(t, tc.topicRetention, tc.retainAcked)
				if ms != nil {
					ack(t, srv, client, ms)
				}
				if err := publish(srv); status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("Publish with the bound full of retained messages: %v", err)
				}
				time.Sleep(time.Hour + time.Second)
				if err := publish(srv); err != nil {
					t.Fatalf("Publish once they are past the window: %v", err)
				}
			})
		})
	}
	t.Run("unacknowledged past the retention", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, _, _ := setup(t, false, false)
			time.Sleep(time.Hour + time.Second) // their ack deadlines expire, nobody pulls
			if err := publish(srv); err != nil {
				t.Fatalf("Publish once they are past the retention: %v", err)
			}
			if st := srv.SubscriptionStats("sub"); st.Discarded == 0 {
				t.Errorf("stats %+v", st)
			}
		})
	})
	t.Run("snapshot", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv, client, ms := setup(t, false, false)
			ctx := context.Background()
			snap := &pubsubpb.CreateSnapshotRequest{Name: "projects/" + srv.Project() + "/snapshots/snap", Subscription: srv.subName("sub")}
			if _, err := client.CreateSnapshot(ctx, snap); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("CreateSnapshot of a subscription holding the whole bound: %v", err)
			}
			ack(t, srv, client, ms[:3*len(ms)/4])
			if _, err := client.CreateSnapshot(ctx, snap); err != nil {
				t.Fatal(err)
			}
			// With the subscription gone, the snapshot alone holds what is
			// published from now on, until the bound is full.
			if err := deleteSub(srv, "sub"); err != nil {
				t.Fatal(err)
			}
			for {
				if err := publish(srv); status.Code(err) == codes.ResourceExhausted {
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(7 * 24 * time.Hour)
			if err := publish(srv); err != nil {
				t.Fatalf("Publish once the snapshot expired: %v", err)
			}
		})
	})
}
