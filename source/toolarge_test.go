package source

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestReceiveTooLargeIsTerminal: a message over the client's own receive
// limit fails every retry the same way, so the default policy ends the
// source, and the error names the option to raise while keeping its code;
// the service's own RESOURCE_EXHAUSTED (a quota) is still retried.
func TestReceiveTooLargeIsTerminal(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9437300 vs. 4194304)"), false},
		{status.Error(codes.ResourceExhausted, "grpc: received message after decompression larger than max 4194304"), false},
		{status.Error(codes.ResourceExhausted, "grpc: message after decompression larger than max (5 vs. 4)"), false},
		{status.Error(codes.ResourceExhausted, "Quota exceeded for quota metric 'Subscriber throughput'"), true},
		{status.Error(codes.Internal, "grpc: received message larger than max (1 vs. 0)"), true},
	} {
		if got := DefaultClassifier(failure(c.err, 1, nil)); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
	raw := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9437300 vs. 4194304)")
	err := explain(raw)
	var tl *ReceiveTooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("explain: %T, want *ReceiveTooLargeError", err)
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("code %v, want ResourceExhausted", status.Code(err))
	}
	if !strings.Contains(err.Error(), "grpc.MaxCallRecvMsgSize") || !strings.Contains(err.Error(), "9437300") {
		t.Errorf("error %q must name grpc.MaxCallRecvMsgSize and keep the sizes", err)
	}
	if explain(err) != err {
		t.Error("explain wrapped twice")
	}
	other := status.Error(codes.Unavailable, "x")
	if explain(other) != other {
		t.Error("explain changed an unrelated error")
	}
}

// lookalike is a status a server sends with the text of gRPC's own
// receive-size error.
const lookalike = "grpc: received message larger than max (9437300 vs. 4194304)"

// TestServerSizeTextRetried: RESOURCE_EXHAUSTED with gRPC's receive-size
// text, sent by the server as it opens the stream (a trailers-only
// answer), is the server's: the source reconnects with backoff and
// receives, and never ends with a ReceiveTooLargeError.
func TestServerSizeTextRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		h.publish(t, 1, 0)
		h.srv.FailNextWith("StreamingPull", 2, status.New(codes.ResourceExhausted, lookalike))
		var rec recorder
		src, err := Subscribe(h.client, Config{Subscription: h.sub, events: rec.record})
		if err != nil {
			t.Fatal(err)
		}
		checkRetried(t, src, &rec)
		if calls := h.srv.MethodStats("StreamingPull").Calls; calls != 3 {
			t.Fatalf("%d StreamingPull calls, want 3 (two refused, one that delivered)", calls)
		}
	})
}

// TestServerSizeTextAfterHeadersRetried: the same text in a status the
// server sends after a response, with an ErrorInfo detail (as the service
// attaches), is the server's too: the source reconnects and receives.
func TestServerSizeTextAfterHeadersRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := status.New(codes.ResourceExhausted, lookalike).WithDetails(&errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "googleapis.com"})
		if err != nil {
			t.Fatal(err)
		}
		f := &scripted{script: func(n int, ss pubsubpb.Subscriber_StreamingPullServer) error {
			if n == 1 {
				if err := ss.Send(&pubsubpb.StreamingPullResponse{}); err != nil {
					return err
				}
				return st.Err()
			}
			if err := ss.Send(&pubsubpb.StreamingPullResponse{ReceivedMessages: []*pubsubpb.ReceivedMessage{
				{AckId: "a1", Message: &pubsubpb.PubsubMessage{MessageId: "1", Data: []byte("x")}},
			}}); err != nil {
				return err
			}
			return holdOpen(ss)
		}}
		var rec recorder
		src, err := Subscribe(serveScripted(t, f), Config{Subscription: "projects/p/subscriptions/sub", events: rec.record})
		if err != nil {
			t.Fatal(err)
		}
		checkRetried(t, src, &rec)
		if n, _, _ := f.counts(); n != 2 {
			t.Fatalf("%d streams, want 2", n)
		}
	})
}

// checkRetried runs src until it delivers a message, then checks that
// every failure before it was the server's RESOURCE_EXHAUSTED, retried.
func checkRetried(t *testing.T, src *Source, rec *recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := stage.NewGroup(ctx)
	out := src.Run(g)
	select {
	case m, ok := <-out:
		if !ok {
			t.Fatalf("output closed before a message: %v", g.Wait())
		}
		m.Ack()
	case <-ctx.Done():
		t.Fatal("no message within a minute")
	}
	g.Cancel()
	for range out {
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("pipeline ended with %v", err)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.of(event.Terminal)); n != 0 {
		t.Fatalf("%d terminal events, want none", n)
	}
	recs := rec.of(event.Reconnect)
	if len(recs) == 0 {
		t.Fatal("no reconnect")
	}
	for _, e := range recs {
		var tl *ReceiveTooLargeError
		if status.Code(e.Err) != codes.ResourceExhausted || errors.As(e.Err, &tl) || isReceiveTooLarge(e.Err) {
			t.Fatalf("reconnect after %v (%T), want the server's RESOURCE_EXHAUSTED", e.Err, e.Err)
		}
	}
}

// TestClientSizeErrorTerminal: a response over the client's own receive
// limit (gRPC's default 4 MiB here) is the client's error: the source ends
// after the one stream with a ReceiveTooLargeError.
func TestClientSizeErrorTerminal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &scripted{script: func(_ int, ss pubsubpb.Subscriber_StreamingPullServer) error {
			if err := ss.Send(&pubsubpb.StreamingPullResponse{ReceivedMessages: []*pubsubpb.ReceivedMessage{
				{AckId: "a1", Message: &pubsubpb.PubsubMessage{MessageId: "1", Data: make([]byte, 5<<20)}},
			}}); err != nil {
				return err
			}
			return holdOpen(ss)
		}}
		src, err := Subscribe(serveScripted(t, f), Config{Subscription: "projects/p/subscriptions/sub"})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		for range src.Run(g) {
			t.Error("a message was delivered")
		}
		err = g.Wait()
		var tl *ReceiveTooLargeError
		if !errors.As(err, &tl) || status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("err = %v, want a *ReceiveTooLargeError", err)
		}
		if n, _, _ := f.counts(); n != 1 {
			t.Fatalf("%d streams, want 1", n)
		}
		if err := src.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
