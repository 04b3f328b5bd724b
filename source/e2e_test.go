package source

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// consume reads out, acks every message after ackEvery messages or when
// out pauses, and returns the message ids seen (with repeats) once want
// distinct ids arrived.
func consume(t *testing.T, ctx context.Context, h *harness, out <-chan *Message, want int, pace time.Duration) map[string]int {
	t.Helper()
	seen := make(map[string]int)
	var pending []string
	for len(seen) < want {
		select {
		case m, ok := <-out:
			if !ok {
				t.Fatalf("output closed after %d of %d messages", len(seen), want)
			}
			seen[m.ID]++
			pending = append(pending, m.AckID)
			if len(pending) >= 50 {
				if pace > 0 {
					time.Sleep(pace) // virtual: a consumer that takes its time
				}
				if err := h.ack(ctx, pending); err != nil {
					t.Fatal(err)
				}
				pending = pending[:0]
			}
		case <-ctx.Done():
			t.Fatalf("gave up after %d of %d messages", len(seen), want)
		}
	}
	return seen
}

// TestHeartbeatsKeepStreamOpen: against the strict server, 5 s with max
// outstanding set and a 100 ms heartbeat: no INVALID_ARGUMENT, one stream,
// still open, every heartbeat answered.
func TestHeartbeatsKeepStreamOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{}, pubsubtest.WithRecordStreamRequests())
		src, err := Subscribe(h.client, Config{
			Subscription:           h.sub,
			MaxOutstandingMessages: 100,
			MaxOutstandingBytes:    10 << 20,
			HeartbeatInterval:      100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		h.publish(t, 300, 10)
		seen := consume(t, g.Context(), h, out, 300, 0)
		time.Sleep(5 * time.Second)
		synctest.Wait()

		streams := h.srv.Streams(h.sub)
		if len(streams) != 1 || !streams[0].Open {
			t.Fatalf("streams = %+v, want one open stream", streams)
		}
		st := streams[0]
		if st.Rejected != 0 || h.srv.SubscriptionStats(h.sub).RejectedRequests != 0 {
			t.Fatalf("rejected requests: stream %d, subscription %d", st.Rejected, h.srv.SubscriptionStats(h.sub).RejectedRequests)
		}
		if st.Heartbeats < 49 || st.HeartbeatReplies != st.Heartbeats {
			t.Fatalf("heartbeats %d, answered %d: want ≥ 49 in 5 s, all answered", st.Heartbeats, st.HeartbeatReplies)
		}
		if st.MaxOutstandingMessages != 100 || st.MaxOutstandingBytes != 10<<20 || st.ClientID != src.ClientID() || st.ProtocolVersion != 1 {
			t.Fatalf("initial request seen by the server: %+v", st)
		}
		for i, r := range st.RequestLog[1:] {
			if !proto.Equal(r, &pubsubpb.StreamingPullRequest{}) {
				t.Fatalf("later request %d is not the zero value (initial-only fields?): %v", i, r)
			}
		}
		if len(seen) != 300 {
			t.Fatalf("received %d distinct messages, want 300", len(seen))
		}
		g.Cancel()
		if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	})
}

// TestReconnectsUnderKills: streams killed every 200 ms with UNAVAILABLE
// while 10,000 messages flow. Every message arrives at least once, every
// reconnect waits at least the minimum delay, and the server saw the same
// client id on every stream.
func TestReconnectsUnderKills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		var rec recorder
		src, err := Subscribe(h.client, Config{
			Subscription:           h.sub,
			MaxOutstandingMessages: 200,
			Streams:                2,
			events:                 rec.record,
		})
		if err != nil {
			t.Fatal(err)
		}
		const n = 10000
		h.publish(t, n, 64)
		ctx, cancel := context.WithCancel(context.Background())
		g := stage.NewGroup(ctx)
		out := src.Run(g)
		killerDone := make(chan struct{})
		kills := 0
		go func() {
			defer close(killerDone)
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					kills += h.srv.KillStreams(codes.Unavailable, "injected: stream reset")
				case <-g.Context().Done():
					return
				}
			}
		}()
		seen := consume(t, g.Context(), h, out, n, 5*time.Millisecond)
		cancel()
		<-killerDone
		if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}

		if len(seen) != n {
			t.Fatalf("received %d distinct messages, want %d", len(seen), n)
		}
		streams := h.srv.Streams(h.sub)
		if kills < 10 || len(streams) < 10 {
			t.Fatalf("%d kills, %d streams: the test did not exercise reconnects", kills, len(streams))
		}
		for _, st := range streams {
			if st.ClientID != src.ClientID() {
				t.Fatalf("stream %d client id %q, want %q on every stream", st.ID, st.ClientID, src.ClientID())
			}
			if st.MaxOutstandingMessages != 100 {
				t.Fatalf("stream %d max outstanding %d, want 200/2", st.ID, st.MaxOutstandingMessages)
			}
		}
		// Every kill shows as a reconnect, except that a stream waiting
		// for the consumer to take its last batch when the consumer stops
		// never reads again, so it never sees a kill of the last moments
		// (at most one per stream).
		reconnects := rec.of(event.Reconnect)
		if len(reconnects) < kills-2 {
			t.Fatalf("%d reconnect events for %d kills", len(reconnects), kills)
		}
		for _, r := range reconnects {
			if r.Delay < defaultBackoffMin || status.Code(r.Err) != codes.Unavailable {
				t.Fatalf("reconnect %+v: want a delay ≥ %v after UNAVAILABLE", r, defaultBackoffMin)
			}
		}
		// Each stream's reopening follows its disconnect by at least the
		// minimum delay: the restart backs off instead of spinning.
		last := map[int]time.Time{}
		for _, e := range rec.all() {
			switch e.Kind {
			case event.Disconnect:
				last[e.Stream] = e.at
			case event.Connect:
				if d, ok := last[e.Stream]; ok && e.at.Sub(d) < defaultBackoffMin {
					t.Fatalf("stream %d reconnected %v after its disconnect", e.Stream, e.at.Sub(d))
				}
			}
		}
		t.Logf("%d kills, %d streams opened, %d reconnects, %d deliveries for %d messages",
			kills, len(streams), len(reconnects), h.srv.SubscriptionStats(h.sub).Delivered, n)
	})
}

// TestBackoffGrowsAndResets: failed opens wait 100, 200, 400, 800 ms
// (Exponential policy); after a healthy stream the next failure waits
// 100 ms again.
func TestBackoffGrowsAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		var rec recorder
		src, err := Subscribe(h.client, Config{
			Subscription: h.sub,
			Backoff:      gax.Backoff{Initial: 100 * time.Millisecond, Max: time.Minute},
			events:       rec.record,
		})
		if err != nil {
			t.Fatal(err)
		}
		h.srv.FailNext("StreamingPull", 4, codes.Unavailable)
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		h.publish(t, 1, 10)
		<-out // the fifth stream is healthy
		h.srv.KillStreams(codes.Unavailable, "injected")
		synctest.Wait()
		h.publish(t, 1, 10)
		<-out
		g.Cancel()
		_ = g.Wait()

		var delays []time.Duration
		for _, r := range rec.of(event.Reconnect) {
			delays = append(delays, r.Delay)
		}
		// Each delay is drawn from [cap/2, cap] (raised to 100 ms), cap
		// doubling from 100 ms per consecutive failure; the healthy stream
		// (it delivered a message) resets it.
		caps := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 100 * time.Millisecond}
		if len(delays) != len(caps) {
			t.Fatalf("delays %v, want %d", delays, len(caps))
		}
		for i, c := range caps {
			if delays[i] < max(c/2, 100*time.Millisecond) || delays[i] > c {
				t.Fatalf("delay %d = %v, want within [%v, %v] (all: %v)", i, delays[i], max(c/2, 100*time.Millisecond), c, delays)
			}
		}
		if n := len(rec.of(event.ConnectFailed)) + len(rec.of(event.Disconnect)); n != 5 {
			t.Fatalf("%d failures reported, want 5", n)
		}
	})
}

// TestTerminalAfterOneAttempt: NOT_FOUND and PERMISSION_DENIED end the
// pipeline after one attempt, with the status code kept and the
// subscription named.
func TestTerminalAfterOneAttempt(t *testing.T) {
	for _, c := range []struct {
		name string
		code codes.Code
	}{{"not found", codes.NotFound}, {"permission denied", codes.PermissionDenied}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, pubsubtest.SubscriptionConfig{})
				sub := h.sub
				if c.code == codes.NotFound {
					sub = "projects/" + h.srv.Project() + "/subscriptions/absent"
				} else {
					h.srv.FailNext("StreamingPull", 1, codes.PermissionDenied)
				}
				var rec recorder
				src, err := Subscribe(h.client, Config{Subscription: sub, events: rec.record})
				if err != nil {
					t.Fatal(err)
				}
				g := stage.NewGroup(context.Background())
				out := src.Run(g)
				for range out {
					t.Fatal("unexpected message")
				}
				err = g.Wait()
				if status.Code(err) != c.code {
					t.Fatalf("err = %v, code %v, want %v", err, status.Code(err), c.code)
				}
				if !strings.Contains(err.Error(), sub) {
					t.Fatalf("err %q does not name the subscription %s", err, sub)
				}
				if calls := h.srv.MethodStats("StreamingPull").Calls; calls != 1 {
					t.Fatalf("%d StreamingPull calls, want 1", calls)
				}
				if len(rec.of(event.Terminal)) != 1 || len(rec.of(event.Reconnect)) != 0 {
					t.Fatalf("events: %d terminal, %d reconnect", len(rec.of(event.Terminal)), len(rec.of(event.Reconnect)))
				}
			})
		})
	}
}

// TestUnauthenticatedRetriedOnce: one UNAUTHENTICATED is retried (the token
// may have expired in flight); a second in a row ends the source.
func TestUnauthenticatedRetriedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		h.srv.FailNext("StreamingPull", 2, codes.Unauthenticated)
		src, err := Subscribe(h.client, Config{Subscription: h.sub})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		for range src.Run(g) {
		}
		if err := g.Wait(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("err = %v, want UNAUTHENTICATED", err)
		}
		if calls := h.srv.MethodStats("StreamingPull").Calls; calls != 2 {
			t.Fatalf("%d StreamingPull calls, want 2", calls)
		}
	})
}

// TestNeverReconnectEndsOnFirstFailure: with a classifier that never
// reconnects even a retryable failure ends the source, with its code.
func TestNeverReconnectEndsOnFirstFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		h.srv.FailNext("StreamingPull", 1, codes.Unavailable)
		src, err := Subscribe(h.client, Config{Subscription: h.sub, Classify: func(Failure) bool { return false }})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		for range src.Run(g) {
		}
		if err := g.Wait(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), h.sub) {
			t.Fatalf("err = %v, want UNAVAILABLE naming %s", err, h.sub)
		}
	})
}

// TestStreamsShareBudget: four streams all receive, and each carried a
// quarter of the subscription's limits to the server, which never let one
// hold more.
func TestStreamsShareBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		src, err := Subscribe(h.client, Config{Subscription: h.sub, Streams: 4, MaxOutstandingMessages: 1000})
		if err != nil {
			t.Fatal(err)
		}
		h.publish(t, 2000, 10)
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		// Hold 1000 unacked messages: no single stream may have more than
		// 250 out, so all four must have delivered.
		var held []string
		for len(held) < 1000 {
			held = append(held, (<-out).AckID)
		}
		synctest.Wait()
		streams := h.srv.Streams(h.sub)
		if len(streams) != 4 {
			t.Fatalf("%d streams, want 4", len(streams))
		}
		for _, st := range streams {
			if st.MaxOutstandingMessages != 250 || st.MaxOutstandingBytes != (100<<20)/4 {
				t.Fatalf("stream %d limits %d msgs / %d bytes, want 250 / 25 MiB", st.ID, st.MaxOutstandingMessages, st.MaxOutstandingBytes)
			}
			if st.Delivered == 0 || st.MaxOutstanding > 250 || st.ClientID != src.ClientID() {
				t.Fatalf("stream %d: %+v", st.ID, st)
			}
		}
		if out := h.srv.SubscriptionStats(h.sub).Outstanding; out != 1000 {
			t.Fatalf("%d outstanding, want exactly the 1000 budget", out)
		}
		if err := h.ack(g.Context(), held); err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			<-out
		}
		g.Cancel()
		_ = g.Wait()
	})
}

// TestStalledConsumerStallsServer: with no server-side limit, a consumer
// that stops reading stops the server once the gRPC window and the
// source's one-response hand-off are full; the server's counters stay put
// through heartbeats until the queued messages' deadline (past it they are
// expired, making room), and the watchdog does not mistake the stall for a
// dead stream.
func TestStalledConsumerStallsServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		src, err := Subscribe(h.client, Config{Subscription: h.sub, MaxOutstandingMessages: -1, MaxOutstandingBytes: -1, HeartbeatInterval: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		const n, size = 50000, 1024
		h.publish(t, n, size)
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		for range 10 {
			<-out
		}
		synctest.Wait()
		stalled := h.srv.SubscriptionStats(h.sub).Delivered
		time.Sleep(55 * time.Second) // five heartbeats, short of the 60 s deadline
		synctest.Wait()
		after := h.srv.SubscriptionStats(h.sub)
		if after.Delivered != stalled || stalled >= n {
			t.Fatalf("delivered %d when stalled, %d 55 s later, of %d published", stalled, after.Delivered, n)
		}
		streams := h.srv.Streams(h.sub)
		if len(streams) != 1 || !streams[0].Open {
			t.Fatalf("streams = %+v, want the one stream still open", streams)
		}
		t.Logf("server stopped after %d of %d messages (%.1f MiB in flight)", stalled, n, float64(stalled*size)/(1<<20))
		// Reading again resumes delivery.
		for range 1000 {
			<-out
		}
		if d := h.srv.SubscriptionStats(h.sub).Delivered; d <= stalled {
			t.Fatalf("delivered %d after resuming, was %d", d, stalled)
		}
		g.Cancel()
		_ = g.Wait()
	})
}

// TestSubscriptionPropertiesReachMessages: the exactly-once and ordering
// properties the server reports are set on each message.
func TestSubscriptionPropertiesReachMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{EnableExactlyOnceDelivery: true, EnableMessageOrdering: true})
		src, err := Subscribe(h.client, Config{Subscription: h.sub})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		h.publish(t, 1, 10)
		m := <-out
		if !m.ExactlyOnce || !m.Ordered || m.Subscription != h.sub || m.DeliveryAttempt != 1 || m.AckID == "" ||
			m.PublishTime.IsZero() || m.ReceiveTime.IsZero() || m.Size() == 0 || string(m.Data[:2]) != "m0" {
			t.Fatalf("message = %+v", m)
		}
		if p := src.props.Load(); !p.GetExactlyOnceDeliveryEnabled() || !p.GetMessageOrderingEnabled() {
			t.Fatalf("subscription properties = %v", p)
		}
		g.Cancel()
		_ = g.Wait()
	})
}

// TestSetStreamAckDeadlineReachesServer: the server applies a deadline
// change to the open stream without rejecting the request.
func TestSetStreamAckDeadlineReachesServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		src, err := Subscribe(h.client, Config{Subscription: h.sub})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		src.Run(g)
		synctest.Wait()
		src.setStreamAckDeadline(2 * time.Minute)
		synctest.Wait()
		st := h.srv.Streams(h.sub)[0]
		if st.AckDeadline != 2*time.Minute || st.Rejected != 0 || !st.Open {
			t.Fatalf("stream = %+v, want ack deadline 2m, open", st)
		}
		g.Cancel()
		_ = g.Wait()
	})
}

// TestTerminalErrorReturnedByPipeline: composed with the pipeline DSL, a
// terminal failure is what To returns, code intact.
func TestTerminalErrorReturnedByPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		h.srv.FailNext("StreamingPull", 1, codes.PermissionDenied)
		src, err := Subscribe(h.client, Config{Subscription: h.sub})
		if err != nil {
			t.Fatal(err)
		}
		err = pipeline.From[*Message](src).To(pipeline.ForEach(func(context.Context, *Message) error { return nil }))
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), h.sub) {
			t.Fatalf("pipeline returned %v, want PERMISSION_DENIED naming %s", err, h.sub)
		}
	})
}
