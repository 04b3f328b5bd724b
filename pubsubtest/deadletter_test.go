package pubsubtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// wantCode fails unless err has the code and its message names every
// word in words.
func wantCode(t *testing.T, what string, err error, code codes.Code, words ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("%s: %q does not name %q", what, st.Message(), w)
		}
	}
}

func TestGoogleClientDeadLetterPolicyValidation(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := newGoogleClient(t, srv)
	ctx := context.Background()
	for _, name := range []string{"topic", "dead"} {
		if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: srv.topicName(name)}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(id string, dlp *pubsubpb.DeadLetterPolicy) (*pubsubpb.Subscription, error) {
		return c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
			Name: srv.subName(id), Topic: srv.topicName("topic"), DeadLetterPolicy: dlp,
		})
	}
	for _, tc := range []struct {
		name  string
		topic string // dead-letter topic id; "" for none
		n     int32  // max_delivery_attempts
		code  codes.Code
		want  string // in the message
	}{
		{"4 attempts", "dead", 4, codes.InvalidArgument, "max_delivery_attempts"},
		{"101 attempts", "dead", 101, codes.InvalidArgument, "max_delivery_attempts"},
		{"-1 attempts", "dead", -1, codes.InvalidArgument, "max_delivery_attempts"},
		{"missing dead-letter topic", "missing", 5, codes.NotFound, srv.topicName("missing")},
		{"no dead-letter topic", "", 5, codes.InvalidArgument, "dead_letter_topic"},
	} {
		dlp := &pubsubpb.DeadLetterPolicy{MaxDeliveryAttempts: tc.n}
		if tc.topic != "" {
			dlp.DeadLetterTopic = srv.topicName(tc.topic)
		}
		_, err := create("bad", dlp)
		wantCode(t, tc.name, err, tc.code, tc.want)
	}

	// 0 attempts means the service's default of 5.
	got, err := create("okay", &pubsubpb.DeadLetterPolicy{DeadLetterTopic: srv.topicName("dead")})
	if err != nil || got.GetDeadLetterPolicy().GetMaxDeliveryAttempts() != 5 {
		t.Fatalf("CreateSubscription = %v, %v; want max_delivery_attempts 5", got, err)
	}
	// The policy can be changed and removed by UpdateSubscription, with the
	// same checks.
	upd := func(dlp *pubsubpb.DeadLetterPolicy) error {
		_, err := c.SubscriptionAdminClient.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
			Subscription: &pubsubpb.Subscription{Name: srv.subName("okay"), DeadLetterPolicy: dlp},
			UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"dead_letter_policy"}},
		})
		return err
	}
	wantCode(t, "update to 200 attempts", upd(&pubsubpb.DeadLetterPolicy{DeadLetterTopic: srv.topicName("dead"), MaxDeliveryAttempts: 200}), codes.InvalidArgument, "max_delivery_attempts")
	if err := upd(nil); err != nil {
		t.Fatalf("removing the policy: %v", err)
	}
}

func TestGoogleClientDeadLetter(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := newGoogleClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"topic", "dead"} {
		if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: srv.topicName(name)}); err != nil {
			t.Fatal(err)
		}
	}
	const attempts = 5
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: srv.subName("sub"), Topic: srv.topicName("topic"),
		DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: srv.topicName("dead"), MaxDeliveryAttempts: attempts},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: srv.subName("dlsub"), Topic: srv.topicName("dead"),
	}); err != nil {
		t.Fatal(err)
	}

	pub := c.Publisher("topic")
	res := pub.Publish(ctx, &pubsub.Message{Data: []byte("poison"), Attributes: map[string]string{"origin": "test"}})
	id, err := res.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub.Stop()

	// Nack every delivery on s.
	var mu sync.Mutex
	var seen []int
	var publishTime time.Time
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscriber("sub").Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			mu.Lock()
			if m.DeliveryAttempt == nil {
				seen = append(seen, -1)
			} else {
				seen = append(seen, *m.DeliveryAttempt)
			}
			publishTime = m.PublishTime
			mu.Unlock()
			m.Nack()
		})
	}()
	waitFor(t, "dead-lettered", func() bool { return srv.SubscriptionStats("sub").DeadLettered == 1 })
	rcancel()
	if err := <-done; err != nil {
		t.Fatalf("Receive s: %v", err)
	}
	mu.Lock()
	if want := []int{1, 2, 3, 4, 5}; !equalInts(seen, want) {
		t.Errorf("delivery attempts on s = %v, want %v", seen, want)
	}
	mu.Unlock()
	if st := srv.SubscriptionStats("sub"); st.Backlog != 0 || st.Outstanding != 0 || st.Delivered != attempts || st.Acked != 0 {
		t.Errorf("source stats = %+v", st)
	}

	// The copy on the dead-letter topic, received with Google's client.
	got := make(chan *pubsub.Message, 1)
	rctx, rcancel = context.WithCancel(ctx)
	go func() {
		done <- c.Subscriber("dlsub").Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			select {
			case got <- m:
			default:
			}
		})
	}()
	var m *pubsub.Message
	select {
	case m = <-got:
	case <-ctx.Done():
		t.Fatal("no message on the dead-letter subscription")
	}
	waitFor(t, "dl acked", func() bool { return srv.SubscriptionStats("dlsub").Acked == 1 })
	rcancel()
	if err := <-done; err != nil {
		t.Fatalf("Receive dl: %v", err)
	}
	want := map[string]string{
		"origin":                          "test",
		attrDeadLetterDeliveryCount:       "5",
		attrDeadLetterSubscription:        "sub",
		attrDeadLetterSubscriptionProject: srv.Project(),
		attrDeadLetterTopicPublishTime:    publishTime.UTC().Format("2006-01-02T15:04:05.000+00:00"),
	}
	if string(m.Data) != "poison" || m.ID == id || len(m.Attributes) != len(want) {
		t.Errorf("dead-lettered message: data %q, id %s (source %s), attributes %v", m.Data, m.ID, id, m.Attributes)
	}
	for k, v := range want {
		if m.Attributes[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, m.Attributes[k], v)
		}
	}
	// dl has no dead-letter policy: the service sets no delivery attempt.
	if m.DeliveryAttempt != nil {
		t.Errorf("delivery attempt on dl = %d, want none", *m.DeliveryAttempt)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDeadLetterAfterExpiryOrderedVirtualTime: expired ack deadlines count
// as failed deliveries too, and on an ordered subscription the next
// message of the key is delivered once the first one is dead-lettered.
func TestDeadLetterAfterExpiryOrderedVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for _, name := range []string{"topic", "dead"} {
			if _, err := srv.CreateTopic(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := srv.CreateSubscription(ctx, SubscriptionConfig{Name: "dlsub", Topic: "dead"}); err != nil {
			t.Fatal(err)
		}
		sub, err := srv.CreateSubscription(ctx, SubscriptionConfig{
			Name: "sub", Topic: "topic", AckDeadline: 10 * time.Second, EnableMessageOrdering: true,
			DeadLetterTopic: "dead", MaxDeliveryAttempts: 5,
		})
		if err != nil {
			t.Fatal(err)
		}
		sp, err := pubsubpb.NewSubscriberClient(srv.ClientConn()).StreamingPull(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.Send(&pubsubpb.StreamingPullRequest{Subscription: sub, StreamAckDeadlineSeconds: 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Publish(ctx, "topic",
			&pubsubpb.PubsubMessage{Data: []byte("first"), OrderingKey: "k"},
			&pubsubpb.PubsubMessage{Data: []byte("second"), OrderingKey: "k"},
		); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// "first" is delivered 5 times, each left to expire; never "second".
		for i := 1; i <= 5; i++ {
			resp, err := sp.Recv()
			if err != nil {
				t.Fatal(err)
			}
			m := resp.ReceivedMessages[0]
			if len(resp.ReceivedMessages) != 1 || string(m.Message.Data) != "first" || m.DeliveryAttempt != int32(i) {
				t.Fatalf("delivery %d: %v", i, resp.ReceivedMessages)
			}
		}
		resp, err := sp.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m := resp.ReceivedMessages[0]; string(m.Message.Data) != "second" || m.DeliveryAttempt != 1 {
			t.Fatalf("after dead-lettering: %v", resp.ReceivedMessages)
		}
		if got := time.Since(start); got != 50*time.Second {
			t.Errorf("second delivered %v after the first, want 5 deadlines of 10 s", got)
		}
		st := srv.SubscriptionStats("sub")
		if st.Expired != 5 || st.DeadLettered != 1 || st.Outstanding != 1 || st.Backlog != 0 {
			t.Errorf("stats %+v", st)
		}
		if st := srv.SubscriptionStats("dlsub"); st.Published != 1 || st.Backlog != 1 {
			t.Errorf("dead-letter subscription stats %+v", st)
		}
		cancel()
		synctest.Wait()
	})
}
