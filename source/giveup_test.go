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

// TestGiveUpBound: failures within the timeout are retried; the first
// failure at or after it is an *UnreachableError carrying the last status
// and the attempt count; a healthy stream starts the count again; a
// non-positive timeout (RetryForever) never gives up.
func TestGiveUpBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := status.Error(codes.Unavailable, "connection refused")
		g := newGiveUp(2 * time.Minute)
		for range 3 {
			time.Sleep(30 * time.Second)
			if err := g.failed(unavailable); err != nil {
				t.Fatalf("gave up after %d attempts, before the timeout: %v", g.attempts, err)
			}
		}
		g.healthy()
		time.Sleep(119 * time.Second)
		if err := g.failed(unavailable); err != nil {
			t.Fatalf("a healthy stream did not restart the count: %v", err)
		}
		time.Sleep(time.Second)
		err := g.failed(unavailable)
		var ue *UnreachableError
		if !errors.As(err, &ue) {
			t.Fatalf("after the timeout: %v, want *UnreachableError", err)
		}
		if ue.Attempts != 2 || ue.After != 2*time.Minute {
			t.Errorf("%+v, want 2 attempts after 2m", ue)
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("error %q (code %v) must carry the last status", err, status.Code(err))
		}

		never := newGiveUp(RetryForever)
		time.Sleep(24 * time.Hour)
		if err := never.failed(unavailable); err != nil {
			t.Fatalf("RetryForever gave up: %v", err)
		}
	})
}

func TestReconnectTimeoutConfig(t *testing.T) {
	c := Config{Subscription: testSub}
	if got := c.withDefaults().ReconnectTimeout; got != DefaultReconnectTimeout {
		t.Errorf("default ReconnectTimeout %v, want %v", got, DefaultReconnectTimeout)
	}
	c.ReconnectTimeout = RetryForever
	if err := c.Validate(); err != nil {
		t.Errorf("RetryForever: %v", err)
	}
	c.ReconnectTimeout = -2
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ReconnectTimeout") {
		t.Errorf("ReconnectTimeout -2: %v, want an error naming it", err)
	}
}
