package source

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/stage"
)

// flapServer is a misbehaving Pub/Sub server: it answers each stream with
// one response (empty, or with one message when deliver is set), keeps it
// open for hold, and then ends it with UNAVAILABLE. It records when each
// stream opened (its initial request arrived).
type flapServer struct {
	pubsubpb.UnimplementedSubscriberServer
	deliver bool
	hold    time.Duration

	mu    sync.Mutex
	opens []time.Time
}

func (f *flapServer) StreamingPull(s pubsubpb.Subscriber_StreamingPullServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	f.mu.Lock()
	n := strconv.Itoa(len(f.opens))
	f.opens = append(f.opens, time.Now())
	f.mu.Unlock()
	resp := &pubsubpb.StreamingPullResponse{}
	if f.deliver {
		resp.ReceivedMessages = []*pubsubpb.ReceivedMessage{{AckId: "a" + n, Message: &pubsubpb.PubsubMessage{MessageId: n, Data: []byte(n)}}}
	}
	if err := s.Send(resp); err != nil {
		return err
	}
	if f.hold > 0 {
		t := time.NewTimer(f.hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	return status.Error(codes.Unavailable, "flapping")
}

func (f *flapServer) Acknowledge(context.Context, *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (f *flapServer) ModifyAckDeadline(context.Context, *pubsubpb.ModifyAckDeadlineRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (f *flapServer) opened() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.opens...)
}

// serveFlap serves f over bufconn (make it inside a synctest bubble) and
// returns a client of it; both close in t.Cleanup.
func serveFlap(t *testing.T, f *flapServer) pubsubpb.SubscriberClient {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer()
	pubsubpb.RegisterSubscriberServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///flap",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
	})
	return pubsubpb.NewSubscriberClient(cc)
}

// flapBackoff is the backoff of these tests: delay k within
// [max(cap/2, 100 ms), cap], cap = 100 ms·2^k up to 2 s.
var flapBackoff = gax.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// delayCap is the cap of the k-th consecutive delay under flapBackoff.
func delayCap(k int) time.Duration {
	return min(flapBackoff.Initial<<min(k, 30), flapBackoff.Max)
}

// delayFloor is the shortest k-th consecutive delay under flapBackoff.
func delayFloor(k int) time.Duration { return max(delayCap(k)/2, flapBackoff.Initial) }

// opensWithin is the fewest and the most opens the backoff allows within
// w of the first, when no delay is ever reset and streams fail at once:
// open k+1 comes between the sums of the first k floors and of the first
// k caps after the first.
func opensWithin(w time.Duration) (fewest, most int) {
	var earliest, latest time.Duration // of the next open
	for k := 0; earliest <= w; k++ {
		most++
		if latest < w {
			fewest++
		}
		earliest += delayFloor(k)
		latest += delayCap(k)
	}
	return fewest, most
}

// runFlap runs a Source of f's server, acking every message, until it ends
// or within has passed; it returns how long Run took, the reconnect
// delays the source chose, and Run's error.
func runFlap(t *testing.T, f *flapServer, timeout, within time.Duration) (time.Duration, []time.Duration, error) {
	t.Helper()
	var rec recorder
	src, err := Subscribe(serveFlap(t, f), Config{Subscription: testSub, Backoff: flapBackoff, ReconnectTimeout: timeout, events: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	start := time.Now()
	g := stage.NewGroup(ctx)
	for m := range src.Run(g) {
		m.Ack()
	}
	err = g.Wait()
	took := time.Since(start)
	var delays []time.Duration
	for _, r := range rec.of(event.Reconnect) {
		delays = append(delays, r.Delay)
	}
	return took, delays, err
}

// TestFlappingServerBacksOff: a server that answers each stream with one
// empty response and then UNAVAILABLE gets reconnects ever further apart:
// no stream is healthy, so the backoff is never reset. In 20 s the opens
// are within what the backoff allows (14–24 with 100 ms – 2 s; a reset
// after each stream, as before, made it 200).
func TestFlappingServerBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flapServer{}
		const window = 20 * time.Second
		_, delays, err := runFlap(t, f, Unlimited, window)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %v, want it to retry until its context ends", err)
		}
		opens := f.opened()
		fewest, most := opensWithin(window)
		t.Logf("%d opens in %v (the backoff allows %d–%d); delays %v", len(opens), window, fewest, most, delays)
		if len(opens) < fewest || len(opens) > most {
			t.Fatalf("%d opens in %v, want %d–%d", len(opens), window, fewest, most)
		}
		for k, d := range delays {
			if d < delayFloor(k) || d > delayCap(k) {
				t.Fatalf("delay %d = %v, want within [%v, %v]: reset by an unhealthy stream? (all: %v)", k, d, delayFloor(k), delayCap(k), delays)
			}
		}
		for k := 1; k < len(opens); k++ {
			if gap := opens[k].Sub(opens[k-1]); gap < delayFloor(k-1) {
				t.Fatalf("open %d came %v after the one before, want at least %v", k, gap, delayFloor(k-1))
			}
		}
	})
}

// TestFlappingServerEndsUnreachable: against the same server
// ReconnectTimeout (3 s) counts from the start, since no stream was
// healthy, and ends the run with an *UnreachableError within 1 s after it.
func TestFlappingServerEndsUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 3 * time.Second
		took, _, err := runFlap(t, &flapServer{}, timeout, time.Minute)
		var ue *UnreachableError
		if !errors.As(err, &ue) || status.Code(err) != codes.Unavailable {
			t.Fatalf("Run = %v (code %v), want an *UnreachableError with UNAVAILABLE", err, status.Code(err))
		}
		t.Logf("ended after %v: %v", took, err)
		if took < timeout || took > timeout+time.Second {
			t.Fatalf("ended after %v, want within [%v, %v]", took, timeout, timeout+time.Second)
		}
	})
}

// TestHealthyStreamsResetBackoff: a stream that delivered a message, or
// stayed open healthyAfter, is healthy: the next delay is Initial again
// and ReconnectTimeout never fires, however often the server then drops
// the stream. A stream dropped just before healthyAfter is not healthy.
func TestHealthyStreamsResetBackoff(t *testing.T) {
	for _, c := range []struct {
		name    string
		f       *flapServer
		healthy bool
	}{
		{"delivered a message", &flapServer{deliver: true}, true},
		{"open 10 s", &flapServer{hold: healthyAfter}, true},
		{"open just under 10 s", &flapServer{hold: healthyAfter - time.Millisecond}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { checkHealthy(t, c.f, c.healthy) })
		})
	}
}

func checkHealthy(t *testing.T, f *flapServer, healthy bool) {
	const timeout = 3 * time.Second
	within := 4*f.hold + 5*time.Second
	took, delays, err := runFlap(t, f, timeout, within)
	t.Logf("%d opens in %v; delays %v; Run = %v", len(f.opened()), took, delays, err)
	var ue *UnreachableError
	if !healthy {
		// The first stream failed after the timeout: that failure ends it.
		if !errors.As(err, &ue) || ue.Attempts != 1 || took != f.hold {
			t.Fatalf("Run = %v after %v, want an *UnreachableError at the first failure (%v)", err, took, f.hold)
		}
		return
	}
	if errors.As(err, &ue) || err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want it to retry until its context ends", err)
	}
	if len(delays) < 4 {
		t.Fatalf("%d reconnects in %v, want at least 4", len(delays), within)
	}
	for k, d := range delays {
		if d != flapBackoff.Initial {
			t.Fatalf("delay %d = %v, want %v after each healthy stream (all: %v)", k, d, flapBackoff.Initial, delays)
		}
	}
}
