package pubsubflow

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/source"
)

// TestSubscriberRefusesBadNamesAndConfigs: names the service refuses and
// configurations that cannot work are clear errors naming the subscription
// or the field; nothing is left running after a failing constructor.
func TestSubscriberRefusesBadNamesAndConfigs(t *testing.T) {
	const sub = "projects/my-project/subscriptions/orders"
	cases := []struct {
		name, sub, want string
		cfg             SubscriberConfig
	}{
		{"space in id", "projects/p/subscriptions/has space", "bad id", SubscriberConfig{}},
		{"300-char id", "projects/p/subscriptions/a" + strings.Repeat("b", 299), "bad id", SubscriberConfig{}},
		{"2-char id", "projects/p/subscriptions/ab", "bad id", SubscriberConfig{}},
		{"id starting with a digit", "projects/p/subscriptions/1abc", "bad id", SubscriberConfig{}},
		{"goog prefix", "projects/p/subscriptions/goog-orders", "bad id", SubscriberConfig{}},
		{"bad project", "projects/My_Project/subscriptions/orders", "bad project id", SubscriberConfig{}},
		{"empty project", "projects//subscriptions/orders", "bad project id", SubscriberConfig{}},
		{"extra part", sub + "/x", "want projects/PROJECT/subscriptions/ID", SubscriberConfig{}},
		{"heartbeat 1 ms", sub, "HeartbeatInterval", SubscriberConfig{HeartbeatInterval: time.Millisecond}},
		{"heartbeat timeout over interval", sub, "HeartbeatTimeout", SubscriberConfig{HeartbeatInterval: 10 * time.Second, HeartbeatTimeout: 20 * time.Second}},
		{"negative reconnect timeout", sub, "ReconnectTimeout", SubscriberConfig{ReconnectTimeout: -time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.cfg.Connect = ConnectOptions{Endpoint: "127.0.0.1:1", Insecure: true}
			s, err := NewSubscriber(ctx, c.sub, c.cfg)
			if err == nil {
				s.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestHeartbeatDefaultsFollowInterval: the default timeout is lowered to a
// shorter interval (documented), the Unlimited reconnect timeout passes.
func TestHeartbeatDefaultsFollowInterval(t *testing.T) {
	c := SubscriberConfig{HeartbeatInterval: 5 * time.Second, ReconnectTimeout: Unlimited}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := c.withDefaults()
	if d.HeartbeatTimeout != 5*time.Second || d.ReconnectTimeout != Unlimited {
		t.Fatalf("defaults %v / %v, want 5s / Unlimited", d.HeartbeatTimeout, d.ReconnectTimeout)
	}
	if d := (SubscriberConfig{}).withDefaults(); d.HeartbeatTimeout != source.DefaultHeartbeatTimeout {
		t.Fatalf("zero config heartbeat timeout %v", d.HeartbeatTimeout)
	}
}

// TestNewSubscriberNilContext: an error, not a panic, and no goroutine left.
func TestNewSubscriberNilContext(t *testing.T) {
	e := newEnv(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var nilCtx context.Context
	s, err := NewSubscriber(nilCtx, e.sub, SubscriberConfig{Connect: ConnectOptions{Endpoint: e.srv.Addr(), Insecure: true}})
	if err == nil {
		s.Close()
		t.Fatal("nil context accepted")
	}
	if !strings.Contains(err.Error(), "nil context") {
		t.Fatalf("error %q does not say nil context", err)
	}
}

// TestOrderingDetectionFailureIsAnError: when the server cannot say
// whether the subscription orders by key (cancelled context, missing
// subscription, unreachable server), NewSubscriber fails instead of
// silently processing ordered messages out of order — and leaves nothing
// running; only PERMISSION_DENIED falls back to SubscriberConfig.Ordering.
func TestOrderingDetectionFailureIsAnError(t *testing.T) {
	e := newEnv(t)
	opts := ConnectOptions{Endpoint: e.srv.Addr(), Insecure: true}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		sub  string
		fail codes.Code // injected on GetSubscription
		want codes.Code // OK = NewSubscriber succeeds
	}{
		{"cancelled context", cancelled, e.sub, codes.OK, codes.Canceled},
		{"missing subscription", context.Background(), "projects/test-project/subscriptions/missing", codes.OK, codes.NotFound},
		{"server unavailable", context.Background(), e.sub, codes.Unavailable, codes.Unavailable},
		{"permission denied falls back", context.Background(), e.sub, codes.PermissionDenied, codes.OK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			if c.fail != codes.OK {
				e.srv.FailNext("GetSubscription", 1, c.fail)
			}
			ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
			defer cancel()
			s, err := NewSubscriber(ctx, c.sub, SubscriberConfig{Connect: opts})
			if c.want == codes.OK {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if status.Code(err) != c.want && !(c.want == codes.Canceled && errors.Is(err, context.Canceled)) {
				t.Fatalf("%v (code %v), want %v", err, status.Code(err), c.want)
			}
			if !strings.Contains(err.Error(), "SubscriberConfig.Ordering") {
				t.Fatalf("error %q should say how to skip the check", err)
			}
		})
	}
	// With Ordering set, nothing is asked: a missing subscription shows up
	// when streams open, not here.
	s, err := NewSubscriber(context.Background(), "projects/test-project/subscriptions/missing", SubscriberConfig{Connect: opts, Ordering: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
