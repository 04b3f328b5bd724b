package ack

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// newServer starts a pubsubtest server (in memory: it works inside a
// synctest bubble) with a topic and a subscription.
func newServer(t *testing.T, sub pubsubtest.SubscriptionConfig) (*pubsubtest.Server, pubsubpb.SubscriberClient, string) {
	t.Helper()
	f := pubsubtest.NewFixture(t, sub, pubsubtest.WithBufconn())
	return f.Server, f.Subscriber, f.Sub
}

// TestLongAckIDsServer: 2,000 acks with long ack ids never make a request
// the server refuses for its size (512 KiB).
func TestLongAckIDsServer(t *testing.T) {
	for _, n := range []int{300, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, client, sub := newServer(t, pubsubtest.SubscriptionConfig{Name: "sub"})
				a, err := New(client, sub, Config{})
				if err != nil {
					t.Fatal(err)
				}
				pad := strings.Repeat("x", n-6)
				for i := range 2000 {
					a.Ack(fmt.Sprintf("%06d%s", i, pad)) // unknown ids: ignored by a plain subscription
				}
				if err := a.Close(t.Context()); err != nil {
					t.Fatal(err)
				}
				ms := srv.MethodStats("Acknowledge")
				if ms.MaxRequestBytes > limits.MaxAckRequestBytes || ms.Errors != 0 {
					t.Fatalf("Acknowledge: %+v; want no request over %d bytes", ms, limits.MaxAckRequestBytes)
				}
				if rej := srv.SubscriptionStats(sub).RejectedRequests; rej != 0 {
					t.Fatalf("%d requests rejected", rej)
				}
				if min := (2000*(n+3) + limits.MaxAckRequestBytes - 1) / limits.MaxAckRequestBytes; ms.Calls < int64(min) || ms.Calls > int64(min)+2 {
					t.Fatalf("%d calls, want about %d", ms.Calls, min)
				}
			})
		})
	}
}

// TestExactlyOnceExpiredAckID: on an exactly-once subscription, acking an
// ack id whose deadline passed settles the result with a permanent
// invalid-ack-id failure, while a live one is confirmed.
func TestExactlyOnceExpiredAckID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client, sub := newServer(t, pubsubtest.SubscriptionConfig{Name: "eos", EnableExactlyOnceDelivery: true, AckDeadline: 10 * time.Second})
		ctx := t.Context()
		if _, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("old")}); err != nil {
			t.Fatal(err)
		}
		old, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})
		if err != nil || len(old.ReceivedMessages) != 1 {
			t.Fatalf("Pull: %v", err)
		}
		time.Sleep(11 * time.Second) // the deadline passes; the message is ready again
		fresh, err := client.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1})
		if err != nil || len(fresh.ReceivedMessages) != 1 {
			t.Fatalf("Pull after expiry: %v", err)
		}

		rec := &recorder{}
		a, err := New(client, sub, Config{Events: rec.fn})
		if err != nil {
			t.Fatal(err)
		}
		expired := a.AckWithResult(old.ReceivedMessages[0].AckId)
		live := a.AckWithResult(fresh.ReceivedMessages[0].AckId)

		err = expired.Wait(ctx)
		var ie *IDError
		if !errors.As(err, &ie) || !errors.Is(err, ErrPermanent) || ie.Reason != ReasonInvalidAckID {
			t.Fatalf("expired ack id: %v, want a permanent %s failure", err, ReasonInvalidAckID)
		}
		if err := live.Wait(ctx); err != nil {
			t.Fatalf("live ack id: %v", err)
		}
		if err := a.Close(ctx); err != nil { // events are reported by then
			t.Fatal(err)
		}
		if e, ok := rec.first("ack_failed"); !ok || e.Count != 1 {
			t.Fatalf("ack_failed event = %+v", e)
		}
		if st := srv.SubscriptionStats(sub); st.Acked != 1 || st.Outstanding != 0 {
			t.Fatalf("server: %+v", st)
		}
	})
}
