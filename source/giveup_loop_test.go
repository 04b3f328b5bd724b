package source

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestUnreachableEndsSourceAfterReconnectTimeout: a server that refuses
// every stream with UNAVAILABLE ends the Source once ReconnectTimeout has
// passed without a healthy stream, with an *UnreachableError carrying the
// last status; every attempt before was reported as a reconnect.
func TestUnreachableEndsSourceAfterReconnectTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		h.srv.FailNext("StreamingPull", 1<<30, codes.Unavailable)
		var rec recorder
		src, err := Subscribe(h.client, Config{Subscription: h.sub, events: rec.record})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		g := stage.NewGroup(context.Background())
		for range src.Run(g) {
			t.Fatal("unexpected message")
		}
		err = g.Wait()
		took := time.Since(start)
		var ue *UnreachableError
		if !errors.As(err, &ue) || status.Code(err) != codes.Unavailable {
			t.Fatalf("err = %v (code %v), want *UnreachableError with UNAVAILABLE", err, status.Code(err))
		}
		// At most one backoff delay (≤ 60 s) and one attempt past the bound.
		if took < DefaultReconnectTimeout || took > DefaultReconnectTimeout+61*time.Second {
			t.Fatalf("ended after %v, want %v plus at most one backoff delay", took, DefaultReconnectTimeout)
		}
		if n := len(rec.of(event.Reconnect)); n != ue.Attempts-1 || n == 0 {
			t.Fatalf("%d reconnect events for %d attempts", n, ue.Attempts)
		}
		if !strings.Contains(err.Error(), h.sub) {
			t.Fatalf("err %q does not name the subscription", err)
		}
	})
}

// TestUnlimitedNeverGivesUp: with Unlimited the Source keeps trying
// until its context ends, and then returns nil.
func TestUnlimitedNeverGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		h.srv.FailNext("StreamingPull", 1<<30, codes.Unavailable)
		src, err := Subscribe(h.client, Config{Subscription: h.sub, ReconnectTimeout: Unlimited})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		g := stage.NewGroup(ctx)
		for range src.Run(g) {
			t.Fatal("unexpected message")
		}
		if err := g.Wait(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's end", err)
		}
		if calls := h.srv.MethodStats("StreamingPull").Calls; calls < 30 {
			t.Fatalf("%d attempts in an hour, want it to keep trying", calls)
		}
	})
}
