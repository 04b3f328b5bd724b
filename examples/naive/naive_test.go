package naive

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
)

const deadline = 10 * time.Second

// server starts a pubsubtest server (in-memory, for synctest) with n
// messages on "sub" and returns it, the subscription's name and a client.
func server(t *testing.T, n int) (*pubsubtest.Server, string, pubsubpb.SubscriberClient) {
	t.Helper()
	f := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: deadline},
		pubsubtest.WithBufconn(), pubsubtest.WithHeartbeatDelay(time.Millisecond))
	msgs := make([]*pubsubpb.PubsubMessage, n)
	for i := range msgs {
		msgs[i] = &pubsubpb.PubsubMessage{Data: []byte("x")}
	}
	f.Publish(t, msgs...)
	return f.Server, f.Sub, f.Subscriber
}

// waitFor polls cond every 10 ms of virtual time, for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); {
		if time.Since(start) > time.Minute {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAcksWhatHandlersReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, sub, client := server(t, 50)
		c, err := Start(context.Background(), client, sub, Config{
			Handler:           func(context.Context, *source.Message) { time.Sleep(time.Millisecond) },
			Parallelism:       4,
			StreamAckDeadline: deadline,
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "50 acked", func() bool { return srv.SubscriptionStats(sub).Acked == 50 })
		if err := c.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if err := c.Stop(); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		st := c.Stats()
		if st.Received != 50 || st.Settled != 50 || st.Outstanding != 0 {
			t.Errorf("Stats = %+v; want 50 received, 50 settled, 0 outstanding", st)
		}
		if st := srv.SubscriptionStats(sub); st.Redelivered != 0 || st.Expired != 0 {
			t.Errorf("server: %+v; want nothing redelivered or expired with a fast handler", st)
		}
	})
}

// TestStopSettlesLeased stops the consumer while every handler is busy: the
// messages it leased are settled (acked by the sink or nacked by Stop), the
// extender holds nothing, and TestMain's goleak checks that no goroutine
// is left.
func TestStopSettlesLeased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, sub, client := server(t, 20)
		c, err := Start(context.Background(), client, sub, Config{
			Handler:           func(ctx context.Context, _ *source.Message) { <-ctx.Done() },
			Parallelism:       2,
			StreamAckDeadline: deadline,
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "2 handlers busy", func() bool { return c.Stats().Processing == 2 })
		if err := c.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		select {
		case <-c.Done():
		default:
			t.Error("Done not closed after Stop")
		}
		if n := c.ext.Stats().Leases; n != 0 {
			t.Errorf("extender still holds %d leases after Stop", n)
		}
		if st := srv.SubscriptionStats(sub); st.Acked+st.Nacked < 2 {
			t.Errorf("server: %+v; want the 2 messages in handlers acked or nacked", st)
		}
	})
}

func TestStartRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Parallelism: 1},
		{Handler: func(context.Context, *source.Message) {}},
	} {
		if c, err := Start(context.Background(), nil, "projects/p/subscriptions/s", cfg); err == nil {
			_ = c.Stop()
			t.Errorf("Start(%+v) = nil error", cfg)
		}
	}
}
