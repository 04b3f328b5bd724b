package pubsubtest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestGoogleClientRetryPolicyValidation(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := newGoogleClient(t, srv)
	ctx := context.Background()
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: srv.topicName("topic")}); err != nil {
		t.Fatal(err)
	}
	create := func(rp *pubsubpb.RetryPolicy) (*pubsubpb.Subscription, error) {
		return c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
			Name: srv.subName("sub"), Topic: srv.topicName("topic"), RetryPolicy: rp,
		})
	}
	for _, tc := range []struct {
		rp   *pubsubpb.RetryPolicy
		name string
	}{
		{&pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(601 * time.Second)}, "retry_policy.minimum_backoff"},
		{&pubsubpb.RetryPolicy{MaximumBackoff: durationpb.New(601 * time.Second)}, "retry_policy.maximum_backoff"},
		{&pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(-time.Second)}, "retry_policy.minimum_backoff"},
		{&pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(20 * time.Second), MaximumBackoff: durationpb.New(10 * time.Second)}, "minimum_backoff"},
	} {
		_, err := create(tc.rp)
		wantCode(t, tc.name, err, codes.InvalidArgument, tc.name)
	}
	// Unset backoffs take the service's defaults, 10 s and 600 s.
	got, err := create(&pubsubpb.RetryPolicy{})
	if err != nil || got.RetryPolicy.MinimumBackoff.AsDuration() != 10*time.Second || got.RetryPolicy.MaximumBackoff.AsDuration() != 600*time.Second {
		t.Fatalf("CreateSubscription = %v, %v", got.GetRetryPolicy(), err)
	}
}

// TestGoogleClientRetryBackoffVirtualTime nacks a message four times with
// Google's client and measures, in virtual time, when the server delivers
// it again: never before the backoff (the minimum, 10 s, doubled after
// each failure, at most the maximum, 30 s), and within the client's nack
// batching (it sends nacks on its own tick) after it. A subscription
// without a retry policy redelivers at once.
func TestGoogleClientRetryBackoffVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn(), WithHeartbeatDelay(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		c := newGoogleClient(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: srv.topicName("topic")}); err != nil {
			t.Fatal(err)
		}
		for _, sub := range []*pubsubpb.Subscription{
			{Name: srv.subName("backoff"), Topic: srv.topicName("topic"), RetryPolicy: &pubsubpb.RetryPolicy{
				MinimumBackoff: durationpb.New(10 * time.Second), MaximumBackoff: durationpb.New(30 * time.Second),
			}},
			{Name: srv.subName("immediate"), Topic: srv.topicName("topic")},
		} {
			if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, sub); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			sub  string
			want []time.Duration
		}{
			{"backoff", []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}},
			{"immediate", []time.Duration{0, 0, 0, 0}},
		} {
			rctx, rcancel := context.WithCancel(ctx)
			deliveries, done := receiveInBubble(rctx, c, tc.sub, func(*pubsub.ReceiveSettings) {})
			prev := <-deliveries
			for i, want := range tc.want {
				prev.m.Nack()
				d := <-deliveries
				gap := d.at.Sub(prev.at)
				t.Logf("%s: redelivery %d after %v", tc.sub, i+1, gap)
				if gap < want || gap > want+time.Second {
					t.Errorf("%s: redelivery %d after %v, want %v (plus the client's nack batching, under 1 s)", tc.sub, i+1, gap, want)
				}
				prev = d
			}
			prev.m.Ack()
			for srv.SubscriptionStats(tc.sub).Acked == 0 {
				time.Sleep(100 * time.Millisecond)
			}
			if st := srv.SubscriptionStats(tc.sub); st.Nacked != 4 || st.Redelivered != 4 || st.Backlog != 0 {
				t.Errorf("%s: stats %+v", tc.sub, st)
			}
			stopReceive(t, rcancel, done)
		}
	})
}

// TestRetryBackoffExact nacks on a raw stream in virtual time: the message
// is ready again exactly the backoff after the server has the nack, and
// the backoff is also applied after an expired ack deadline.
func TestRetryBackoffExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn(), WithDeliveryAttemptAlways())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := srv.CreateTopic(ctx, "topic"); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.rpc().CreateSubscription(ctx, &pubsubpb.Subscription{
			Name: srv.subName("sub"), Topic: srv.topicName("topic"), AckDeadlineSeconds: 10,
			RetryPolicy: &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(3 * time.Second), MaximumBackoff: durationpb.New(5 * time.Second)},
		}); err != nil {
			t.Fatal(err)
		}
		sp, err := pubsubpb.NewSubscriberClient(srv.ClientConn()).StreamingPull(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.Send(&pubsubpb.StreamingPullRequest{Subscription: srv.subName("sub"), StreamAckDeadlineSeconds: 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Publish(ctx, "topic", &pubsubpb.PubsubMessage{Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		next := func() (*pubsubpb.ReceivedMessage, time.Time) {
			resp, err := sp.Recv()
			if err != nil || len(resp.ReceivedMessages) != 1 {
				t.Fatalf("Recv = %v, %v", resp, err)
			}
			return resp.ReceivedMessages[0], time.Now()
		}
		m, _ := next()
		var delivered time.Time
		for i, want := range []time.Duration{3 * time.Second, 5 * time.Second} {
			if err := sp.Send(&pubsubpb.StreamingPullRequest{ModifyDeadlineAckIds: []string{m.AckId}, ModifyDeadlineSeconds: []int32{0}}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the server has applied the nack
			nacked := time.Now()
			m, delivered = next()
			if got := delivered.Sub(nacked); got != want {
				t.Errorf("nack %d: redelivered after %v, want exactly %v", i+1, got, want)
			}
		}
		// Now let the 10 s ack deadline expire: the third failure waits the
		// maximum backoff, 5 s, more.
		m, at := next()
		if got, want := at.Sub(delivered), 15*time.Second; got != want || m.DeliveryAttempt != 4 {
			t.Errorf("after expiry: attempt %d redelivered after %v, want attempt 4 after exactly %v", m.DeliveryAttempt, got, want)
		}
		if st := srv.SubscriptionStats("sub"); st.Nacked != 2 || st.Expired != 1 {
			t.Errorf("stats %+v", st)
		}
		cancel()
		synctest.Wait()
	})
}
