package pubsubflow

import (
	"cmp"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/flow"
)

// TestBadConfigs: each bad value is a clear error from the constructor that
// names its field, never a panic, and nothing is left running.
func TestBadConfigs(t *testing.T) {
	const sub = "projects/p/subscriptions/sub"
	conn := &grpc.ClientConn{}
	cases := []struct {
		name, sub, field string
		cfg              SubscriberConfig
	}{
		{"empty subscription", "", "subscription", SubscriberConfig{}},
		{"topic not subscription", "projects/p/topics/topic", "subscription", SubscriberConfig{}},
		{"missing project", "subscriptions/sub", "subscription", SubscriberConfig{}},
		{"deadline too short", sub, "StreamAckDeadline", SubscriberConfig{StreamAckDeadline: 5 * time.Second}},
		{"deadline too long", sub, "StreamAckDeadline", SubscriberConfig{StreamAckDeadline: 601 * time.Second}},
		{"deadline negative", sub, "StreamAckDeadline", SubscriberConfig{StreamAckDeadline: -time.Second}},
		{"negative messages", sub, "MaxOutstandingMessages", SubscriberConfig{MaxOutstandingMessages: -5}},
		{"negative bytes", sub, "MaxOutstandingBytes", SubscriberConfig{MaxOutstandingBytes: -2}},
		{"negative streams", sub, "Streams", SubscriberConfig{Streams: -1}},
		{"too many streams", sub, "Streams", SubscriberConfig{Streams: 1000}},
		{"negative heartbeat", sub, "HeartbeatInterval", SubscriberConfig{HeartbeatInterval: -time.Second}},
		{"heartbeat timeout too long", sub, "HeartbeatTimeout", SubscriberConfig{HeartbeatTimeout: time.Hour}},
		{"negative max extension", sub, "MaxExtension", SubscriberConfig{MaxExtension: -time.Minute}},
		{"bad success outcome", sub, "OnSuccess", SubscriberConfig{OnSuccess: Outcome(99)}},
		{"expired is not a failure outcome", sub, "OnFailure", SubscriberConfig{OnFailure: Outcome(5)}},
		{"ack on shutdown", sub, "OnShutdown", SubscriberConfig{OnShutdown: Ack}},
		{"nack delay too long", sub, "NackDelay", SubscriberConfig{NackDelay: 11 * time.Minute}},
		{"shutdown nack delay negative", sub, "ShutdownNackDelay", SubscriberConfig{ShutdownNackDelay: -time.Second}},
		{"drain timeout too long", sub, "DrainTimeout", SubscriberConfig{DrainTimeout: 2 * time.Hour}},
		{"client id too long", sub, "ClientID", SubscriberConfig{ClientID: strings.Repeat("x", 129)}},
		{"space in the subscription id", "projects/p/subscriptions/a b", "subscription", SubscriberConfig{}},
		{"negative backoff", sub, "Backoff", SubscriberConfig{Backoff: gax.Backoff{Initial: -time.Second}}},
		{"backoff shrinking", sub, "Backoff", SubscriberConfig{Backoff: gax.Backoff{Multiplier: 0.5}}},
		{"fixed lease interval past its deadline", sub, "Lease", SubscriberConfig{Lease: flow.Fixed(time.Minute, 30*time.Second)}},
		{"adaptive lease above 600 s", sub, "Lease", SubscriberConfig{Lease: flow.Adaptive(flow.AdaptiveConfig{Min: 0, Max: time.Hour})}},
		{"conn and client", sub, "Conn", SubscriberConfig{Conn: conn, Client: pubsubpb.NewSubscriberClient(conn)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewSubscriber(context.Background(), c.sub, c.cfg)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not name %s", err, c.field)
			}
		})
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	env := newEnv(t)
	s := env.subscriber(t, SubscriberConfig{})
	if err := s.Run(context.Background(), 0, func(context.Context, *Message) error { return nil }); err == nil || !strings.Contains(err.Error(), "parallelism") {
		t.Fatalf("parallelism 0: %v", err)
	}
	if err := s.Run(context.Background(), 1, nil); err == nil || !strings.Contains(err.Error(), "handler") {
		t.Fatalf("nil handler: %v", err)
	}
}

// TestNilLoggerIsSlogDefault: a nil Logger means slog.Default() in every
// config: a Subscriber made without one reports a handler's panic there,
// (the publisher's test checks its Config).
func TestNilLoggerIsSlogDefault(t *testing.T) {
	l := &logs{}
	prev := slog.Default()
	slog.SetDefault(slog.New(l))
	t.Cleanup(func() { slog.SetDefault(prev) })

	e := newEnv(t)
	e.publish(t, 1, nil)
	s := e.subscriber(t, SubscriberConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, s, 1, func(context.Context, *Message) error { panic("boom") })
	waitFor(t, "the panic logged to slog.Default()", 10*time.Second, func() bool {
		return l.count(slog.LevelError, "handler panicked") >= 1 // nacked, it comes back and panics again
	})
	cancel()
	<-done
}

// TestDrainTimeoutIsTheSources: the Subscriber's DrainTimeout reaches its
// source as it is, default included, so one setting (the source's drain,
// which shutdown waits on) governs.
func TestDrainTimeoutIsTheSources(t *testing.T) {
	for _, d := range []time.Duration{0, 7 * time.Second} {
		c := SubscriberConfig{DrainTimeout: d}.withDefaults()
		src, _, _ := c.parts("projects/p/subscriptions/sub")
		if want := cmp.Or(d, 30*time.Second); src.DrainTimeout != want || c.DrainTimeout != want {
			t.Errorf("DrainTimeout %v: the source's is %v, the Subscriber's %v; want %v for both", d, src.DrainTimeout, c.DrainTimeout, want)
		}
	}
}
