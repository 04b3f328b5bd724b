package pubsubtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// TestRPCsRefuseWhatTheServiceRefuses: every RPC that takes a resource
// name or messages answers INVALID_ARGUMENT, in the service's words, for
// what the real service refuses — so a test against this server cannot
// pass with input production rejects. Each case runs under a deadline.
func TestRPCsRefuseWhatTheServiceRefuses(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	pubWith := func(m *pubsubpb.PubsubMessage) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := f.pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("ok")}, m}})
			return err
		}
	}
	attrs := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["k"+strings.Repeat("x", i)] = "v"
		}
		return m
	}
	const badTopic = "projects/test-project/topics/has space"
	const badSub = "projects/test-project/subscriptions/goog-sub"
	cases := []struct {
		name string
		call func(ctx context.Context) error
		want string // a fragment of the service's message
	}{
		{"CreateTopic short id", func(ctx context.Context) error {
			_, err := f.pub.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/test-project/topics/ab"})
			return err
		}, "Invalid [topics] name"},
		{"CreateTopic 256 chars", func(ctx context.Context) error {
			_, err := f.pub.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/test-project/topics/a" + strings.Repeat("b", 255)})
			return err
		}, "Invalid [topics] name"},
		{"CreateTopic bad project", func(ctx context.Context) error {
			_, err := f.pub.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/Bad_Project/topics/abc"})
			return err
		}, "Invalid [topics] name"},
		{"GetTopic", func(ctx context.Context) error {
			_, err := f.pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: badTopic})
			return err
		}, "Invalid [topics] name"},
		{"UpdateTopic", func(ctx context.Context) error {
			_, err := f.pub.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{Topic: &pubsubpb.Topic{Name: badTopic}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}})
			return err
		}, "Invalid [topics] name"},
		{"DeleteTopic", func(ctx context.Context) error {
			_, err := f.pub.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: badTopic})
			return err
		}, "Invalid [topics] name"},
		{"ListTopicSubscriptions", func(ctx context.Context) error {
			_, err := f.pub.ListTopicSubscriptions(ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: badTopic})
			return err
		}, "Invalid [topics] name"},
		{"ListTopicSnapshots", func(ctx context.Context) error {
			_, err := f.pub.ListTopicSnapshots(ctx, &pubsubpb.ListTopicSnapshotsRequest{Topic: badTopic})
			return err
		}, "Invalid [topics] name"},
		{"ListTopics", func(ctx context.Context) error {
			_, err := f.pub.ListTopics(ctx, &pubsubpb.ListTopicsRequest{Project: "projects/"})
			return err
		}, "Invalid [projects] name"},
		{"ListSubscriptions", func(ctx context.Context) error {
			_, err := f.sub.ListSubscriptions(ctx, &pubsubpb.ListSubscriptionsRequest{Project: "nope"})
			return err
		}, "Invalid [projects] name"},
		{"CreateSubscription bad id", func(ctx context.Context) error {
			_, err := f.sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: badSub, Topic: f.topic})
			return err
		}, "Invalid [subscriptions] name"},
		{"CreateSubscription bad topic", func(ctx context.Context) error {
			_, err := f.sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: "projects/test-project/subscriptions/fine", Topic: badTopic})
			return err
		}, "Invalid [topics] name"},
		{"GetSubscription", func(ctx context.Context) error {
			_, err := f.sub.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: badSub})
			return err
		}, "Invalid [subscriptions] name"},
		{"UpdateSubscription", func(ctx context.Context) error {
			_, err := f.sub.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{Subscription: &pubsubpb.Subscription{Name: badSub}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}}})
			return err
		}, "Invalid [subscriptions] name"},
		{"DeleteSubscription", func(ctx context.Context) error {
			_, err := f.sub.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: badSub})
			return err
		}, "Invalid [subscriptions] name"},
		{"DetachSubscription", func(ctx context.Context) error {
			_, err := f.pub.DetachSubscription(ctx, &pubsubpb.DetachSubscriptionRequest{Subscription: badSub})
			return err
		}, "Invalid [subscriptions] name"},
		{"ModifyPushConfig", func(ctx context.Context) error {
			_, err := f.sub.ModifyPushConfig(ctx, &pubsubpb.ModifyPushConfigRequest{Subscription: badSub})
			return err
		}, "Invalid [subscriptions] name"},
		{"Acknowledge", func(ctx context.Context) error {
			_, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: badSub, AckIds: []string{"1"}})
			return err
		}, "Invalid [subscriptions] name"},
		{"ModifyAckDeadline", func(ctx context.Context) error {
			_, err := f.sub.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: badSub, AckIds: []string{"1"}, AckDeadlineSeconds: 10})
			return err
		}, "Invalid [subscriptions] name"},
		{"Pull", func(ctx context.Context) error {
			_, err := f.sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: badSub, MaxMessages: 1})
			return err
		}, "Invalid [subscriptions] name"},
		{"StreamingPull", func(ctx context.Context) error {
			st, err := f.sub.StreamingPull(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&pubsubpb.StreamingPullRequest{Subscription: badSub, StreamAckDeadlineSeconds: 10}); err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, "Invalid [subscriptions] name"},
		{"Publish bad topic", func(ctx context.Context) error {
			_, err := f.pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: badTopic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}})
			return err
		}, "Invalid [topics] name"},
		{"Publish empty message", pubWith(&pubsubpb.PubsubMessage{}), "neither data nor attributes"},
		{"Publish 101 attributes", pubWith(&pubsubpb.PubsubMessage{Attributes: attrs(101)}), "too many attributes"},
		{"Publish 300-byte key", pubWith(&pubsubpb.PubsubMessage{Attributes: map[string]string{strings.Repeat("k", 300): "v"}}), "has a key that is too long"},
		{"Publish 2000-byte value", pubWith(&pubsubpb.PubsubMessage{Attributes: map[string]string{"k": strings.Repeat("v", 2000)}}), "has a value that is too long. The length is 2000"},
		{"Publish goog key", pubWith(&pubsubpb.PubsubMessage{Attributes: map[string]string{"googx": "v"}}), "reserved prefix"},
		{"Publish empty key", pubWith(&pubsubpb.PubsubMessage{Data: []byte("x"), Attributes: map[string]string{"": "v"}}), "empty key"},
		{"Publish 2000-byte ordering key", pubWith(&pubsubpb.PubsubMessage{Data: []byte("x"), OrderingKey: strings.Repeat("o", 2000)}), "ordering key that is too long"},
		{"Publish data over 10 MB", pubWith(&pubsubpb.PubsubMessage{Data: make([]byte, 10_000_001)}), "exceeds the limit"},
		{"Publish request over 10 MB", func(ctx context.Context) error {
			_, err := f.pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{{Data: make([]byte, 6_000_000)}, {Data: make([]byte, 6_000_000)}}})
			return err
		}, "Request payload size exceeds the limit"},
	}
	// Invalid UTF-8 cannot reach the server from a Go client: its encoder
	// refuses it (publisher's tests cover that path).
	before := f.srv.SubscriptionStats(f.subn).Published
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := c.call(ctx)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
				t.Fatalf("%v, want INVALID_ARGUMENT with %q", err, c.want)
			}
		})
	}
	if got := f.srv.SubscriptionStats(f.subn).Published; got != before {
		t.Fatalf("%d messages published by refused requests; a refused request publishes none of its messages", got-before)
	}
}

// TestValidNamesAccepted: names at the limits of the rules work.
func TestValidNamesAccepted(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"abc", "a" + strings.Repeat("b", 254), "A-b_c.d~e+f%g"} {
		name := "projects/test-project/topics/" + id
		if _, err := f.pub.CreateTopic(ctx, &pubsubpb.Topic{Name: name}); err != nil {
			t.Errorf("CreateTopic(%s): %v", name, err)
		}
	}
	if _, err := f.pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{{
		Data:        make([]byte, 9<<20),
		Attributes:  map[string]string{strings.Repeat("k", 256): strings.Repeat("v", 1024)},
		OrderingKey: strings.Repeat("o", 1024),
	}}}); err != nil {
		t.Errorf("a message at the limits: %v", err)
	}
}
