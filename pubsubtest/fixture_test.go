package pubsubtest

import (
	"context"
	"testing"
	"testing/synctest"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// The fixture's names, clients and backlog, over TCP and in a bubble.
func TestFixture(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bubble bool
		sc     SubscriptionConfig
		want   string // the subscription's full name
	}{
		{"tcp, default names", false, SubscriptionConfig{}, "projects/test-project/subscriptions/sub"},
		{"bufconn in a bubble, own name", true, SubscriptionConfig{Name: "orders"}, "projects/test-project/subscriptions/orders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(t *testing.T) {
				var opts []Option
				if tc.bubble {
					opts = append(opts, WithBufconn())
				}
				f := NewFixture(t, tc.sc, opts...)
				if f.Topic != "projects/test-project/topics/topic" || f.Sub != tc.want {
					t.Fatalf("names %q, %q", f.Topic, f.Sub)
				}
				// More than one request's worth, so Publish splits.
				if ids := f.Backlog(t, 1500); len(ids) != 1500 {
					t.Fatalf("%d ids, want 1500", len(ids))
				}
				if pubs := f.Server.MethodStats("Publish"); pubs.Calls != 0 {
					t.Errorf("Backlog went through gRPC: %+v", pubs)
				}
				ctx := context.Background()
				resp, err := f.Subscriber.Pull(ctx, &pubsubpb.PullRequest{Subscription: f.Sub, MaxMessages: 2})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.ReceivedMessages) != 2 || string(resp.ReceivedMessages[0].Message.Data) != "m0" || resp.ReceivedMessages[0].DeliveryAttempt != 1 {
					t.Fatalf("pulled %v", resp.ReceivedMessages)
				}
				if _, err := f.Publisher.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: f.Topic}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.bubble {
				synctest.Test(t, run)
			} else {
				run(t)
			}
		})
	}
}

func TestMessagesShape(t *testing.T) {
	msgs := Messages(3, func(i int, m *pubsubpb.PubsubMessage) {
		if i == 1 {
			m.OrderingKey = "k"
		}
	})
	if len(msgs) != 3 || string(msgs[2].Data) != "m2" || msgs[1].OrderingKey != "k" || msgs[0].OrderingKey != "" {
		t.Fatalf("messages %v", msgs)
	}
}
