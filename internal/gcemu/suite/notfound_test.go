package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow"
)

// TestDeletedSubscriptionEndsRun: deleting the subscription under a
// running Subscriber ends Run with NOT_FOUND, naming the subscription.
func TestDeletedSubscriptionEndsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	sub := e.subscription(t, topic, nil)
	got := make(chan struct{}, 1)
	r := e.start(t, sub, pubsubflow.SubscriberConfig{}, 1, func(context.Context, *pubsubflow.Message) error {
		select {
		case got <- struct{}{}:
		default:
		}
		return nil
	})
	e.publish(t, topic, 1, 16)
	select {
	case <-got: // the stream is open and delivering
	case <-time.After(30 * time.Second):
		t.Fatal("nothing received within 30 s")
	}
	if err := e.google.SubscriptionAdminClient.DeleteSubscription(bounded(t, adminTimeout), &pubsubpb.DeleteSubscriptionRequest{Subscription: sub}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.done <- err
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), sub) {
			t.Fatalf("Run returned %v, want NOT_FOUND naming %s", err, sub)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run still running 60 s after its subscription was deleted")
	}
}
