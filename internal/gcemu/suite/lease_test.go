package suite

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow"
)

const (
	leaseMessages = 12
	leaseHandler  = 5 * time.Second
	leaseWorkers  = 2
	// leaseDeadline is the subscription's and the stream's ack deadline:
	// the API's smallest. The last messages wait 25 s in the buffer.
	leaseDeadline = 10 * time.Second
)

// TestLeaseExtensionSlowHandler: 12 messages, 2 workers taking 5 s each, a
// 10 s ack deadline: messages wait up to 25 s before their handler starts,
// and none is redelivered — not while they wait, not after their ack (the
// test keeps running past another deadline to see).
func TestLeaseExtensionSlowHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	topic := e.topic(t)
	sub := e.subscription(t, topic, &pubsubpb.Subscription{AckDeadlineSeconds: int32(leaseDeadline / time.Second)})
	e.publish(t, topic, leaseMessages, 16)

	s := newSeen()
	all := make(chan struct{})
	r := e.start(t, sub, pubsubflow.SubscriberConfig{StreamAckDeadline: leaseDeadline}, leaseWorkers, func(ctx context.Context, m *pubsubflow.Message) error {
		select {
		case <-time.After(leaseHandler): // the slow work
		case <-ctx.Done():
			return ctx.Err()
		}
		if s.add(m.ID) == leaseMessages {
			close(all)
		}
		return nil
	})
	bound := leaseMessages/leaseWorkers*leaseHandler + time.Minute
	select {
	case <-all:
	case <-time.After(bound):
		t.Fatalf("%d of %d handled within %v", s.distinct(), leaseMessages, bound)
	}
	// Past one more deadline (plus margin), anything whose lease lapsed or
	// whose ack was lost would be back.
	time.Sleep(leaseDeadline + 5*time.Second)
	st := r.sub.Stats()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if d := s.duplicates(); d != 0 || st.Redelivered != 0 || st.Expired != 0 {
		t.Fatalf("%d handled twice, %d redelivered, %d expired; want 0", d, st.Redelivered, st.Expired)
	}
	if st.Extended == 0 {
		t.Fatalf("no lease was extended (stats %+v): the test did not exercise extension", st)
	}
}
