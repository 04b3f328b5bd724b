package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

// stopWait waits up to limit (virtual) for the pipeline's result.
func stopWait(t *testing.T, done <-chan error, limit time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("%s: the pipeline still runs %v later, silently", what, limit)
		return nil
	}
}

// TestExtenderClosedEndsPipeline: a pipeline leasing with an Extender that
// is closed while it runs ends with ErrExtenderClosed, as a receipt step
// (at once) and as a stage (at the next message), rather than go on
// handing out messages nobody extends. Before, it ran on: the new messages
// went untracked, lapsed, were redelivered and never acked, silently.
func TestExtenderClosedEndsPipeline(t *testing.T) {
	for name, wire := range map[string]trkWire{"receipt step": trkFused, "stage": trkStage} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const deadline = 10 * time.Second
				f := trkNewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: deadline})
				f.publish(t, 5)
				ext, err := NewExtender(f.client, ExtenderConfig{StreamAckDeadline: deadline})
				if err != nil {
					t.Fatal(err)
				}
				src, err := source.Subscribe(f.client, source.Config{Subscription: f.sub, StreamAckDeadline: deadline})
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = src.Close(context.Background()) }()
				done := make(chan error, 1)
				go func() { done <- wire(context.Background(), src, ext).To(sink.Acknowledge(sink.Policy{})) }()
				waitFor(t, time.Minute, func() bool { return f.srv.SubscriptionStats(f.sub).Acked == 5 }, func() string {
					return fmt.Sprintf("server: %+v", f.srv.SubscriptionStats(f.sub))
				})
				if err := ext.Close(); err != nil {
					t.Fatal(err)
				}
				f.publish(t, 5)
				err = stopWait(t, done, 5*time.Minute, "Extender closed")
				if !errors.Is(err, ErrExtenderClosed) {
					t.Fatalf("pipeline ended with %v, want ErrExtenderClosed", err)
				}
			})
		})
	}
}

// TestModacksFailingEndPipeline: when every modack of the source fails
// for good (PERMISSION_DENIED), the pipeline ends with ErrModacksFailing
// naming the subscription, within a few lease periods. Before, it ran on
// for ever: each lease lapsed, the server redelivered, the new leases
// failed again, and nothing but a log line said so.
func TestModacksFailingEndPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const deadline = 10 * time.Second
		f := trkNewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: deadline})
		f.srv.FailNextWith("ModifyAckDeadline", 1_000_000, status.New(codes.PermissionDenied, "test: denied"))
		f.publish(t, 5)
		ext := trkExtender(t, f.client, ExtenderConfig{StreamAckDeadline: deadline})
		src, err := source.Subscribe(f.client, source.Config{Subscription: f.sub, StreamAckDeadline: deadline})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = src.Close(context.Background()) }()
		var held sharedHeld // holds every message: only extensions keep them
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- trkFused(context.Background(), src, ext).To(held.sink()) }()
		err = stopWait(t, done, 10*time.Minute, "modacks failing for good")
		if !errors.Is(err, ErrModacksFailing) || !strings.Contains(err.Error(), f.sub) || !strings.Contains(err.Error(), "PermissionDenied") {
			t.Fatalf("pipeline ended with %v, want ErrModacksFailing naming %s and PERMISSION_DENIED", err, f.sub)
		}
		if took := time.Since(start); took < deadline || took > 4*deadline {
			t.Fatalf("pipeline ended %v after the start, want between one and four %v lease periods", took, deadline)
		}
		t.Logf("after %v: %v", time.Since(start), err)
	})
}
