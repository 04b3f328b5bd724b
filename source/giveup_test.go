package source

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestGiveUpBound: quick failures within the timeout are retried; the
// first failure at or after it is an *UnreachableError carrying the last
// status and the attempt count; a healthy attempt starts the count again;
// a non-positive timeout (Unlimited) never gives up. (Which stream is
// healthy is connectOnce's to say: flap_test.go.)
func TestGiveUpBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := status.Error(codes.Unavailable, "connection refused")
		g := newGiveUp(2 * time.Minute)
		attempt := func(lasted time.Duration, healthy bool) error {
			time.Sleep(lasted)
			return g.failed(healthy, unavailable)
		}
		for range 3 {
			time.Sleep(30 * time.Second) // backoff
			if err := attempt(time.Second, false); err != nil {
				t.Fatalf("gave up after %d attempts, before the timeout: %v", g.attempts, err)
			}
		}
		if err := attempt(time.Second, true); err != nil {
			t.Fatalf("healthy attempt: %v", err)
		}
		time.Sleep(118 * time.Second)
		if err := attempt(time.Second, false); err != nil {
			t.Fatalf("a healthy stream did not restart the count: %v", err)
		}
		if err := attempt(time.Second, false); err == nil {
			t.Fatal("still retrying 2 min after the last healthy stream")
		}
		g = newGiveUp(2 * time.Minute)
		time.Sleep(2 * time.Minute)
		err := attempt(0, false)
		var ue *UnreachableError
		if !errors.As(err, &ue) {
			t.Fatalf("after the timeout: %v, want *UnreachableError", err)
		}
		if ue.Attempts != 1 || ue.After != 2*time.Minute {
			t.Errorf("%+v, want 1 attempt after 2m", ue)
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("error %q (code %v) must carry the last status", err, status.Code(err))
		}

		never := newGiveUp(Unlimited)
		time.Sleep(24 * time.Hour)
		if err := never.failed(false, unavailable); err != nil {
			t.Fatalf("Unlimited gave up: %v", err)
		}
	})
}

func TestReconnectTimeoutConfig(t *testing.T) {
	c := Config{Subscription: testSub}
	if got := c.withDefaults().ReconnectTimeout; got != DefaultReconnectTimeout {
		t.Errorf("default ReconnectTimeout %v, want %v", got, DefaultReconnectTimeout)
	}
	c.ReconnectTimeout = Unlimited
	if err := c.Validate(); err != nil {
		t.Errorf("Unlimited: %v", err)
	}
	c.ReconnectTimeout = -2
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ReconnectTimeout") {
		t.Errorf("ReconnectTimeout -2: %v, want an error naming it", err)
	}
}
