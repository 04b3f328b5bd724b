package pubsubtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// KillStreams ends the streams named, or every open one; it counts only
// the streams it ended, and the others carry on.
func TestKillStreams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ids    []int64
		want   int
		killed []bool // by stream id - 1
	}{
		{"every open stream", nil, 2, []bool{true, true}},
		{"one by id", []int64{1}, 1, []bool{true, false}},
		{"an id twice and an unknown one", []int64{2, 2, 99}, 1, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, SubscriptionConfig{})
			var sps []pubsubpb.Subscriber_StreamingPullClient
			for i := range 2 { // one at a time, so that ids follow the order
				sps = append(sps, f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10, ProtocolVersion: 1}))
				waitFor(t, "stream open", func() bool { return len(f.srv.Streams("sub")) == i+1 })
			}
			if n := f.srv.KillStreams(codes.Aborted, "bye", tc.ids...); n != tc.want {
				t.Fatalf("KillStreams = %d, want %d", n, tc.want)
			}
			for i, sp := range sps {
				if tc.killed[i] {
					_, err := sp.Recv()
					if st := status.Convert(err); st.Code() != codes.Aborted || st.Message() != "bye" {
						t.Errorf("stream %d Recv = %v", i+1, err)
					}
					if info := f.srv.Streams("")[i]; info.Open || info.Code != codes.Aborted {
						t.Errorf("stream %+v", info)
					}
					continue
				}
				if err := sp.Send(&pubsubpb.StreamingPullRequest{}); err != nil {
					t.Fatal(err)
				}
				if _, err := sp.Recv(); err != nil {
					t.Errorf("stream %d Recv = %v, want a heartbeat answer", i+1, err)
				}
			}
			if n := f.srv.KillStreams(codes.Aborted, "again", tc.ids...); n != 0 {
				t.Errorf("second KillStreams = %d, want 0", n)
			}
		})
	}
}

// FailNext fails the next n calls of one method, before they do anything,
// and counts them; the call after them runs.
func TestFailNext(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		method string
		n      int
		code   codes.Code
		call   func(t *testing.T, f *fixture) error
	}{
		{"Acknowledge", 2, codes.ResourceExhausted, func(t *testing.T, f *fixture) error {
			_, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: []string{"x"}})
			return err
		}},
		{"Publish", 1, codes.Internal, func(t *testing.T, f *fixture) error {
			_, err := f.pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}})
			return err
		}},
		// The stream fails as it opens: its first Recv gets the status,
		// and the server records no stream for it.
		{"StreamingPull", 1, codes.Unavailable, func(t *testing.T, f *fixture) error {
			f.publish(t, 1, "")
			_, err := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10}).Recv()
			return err
		}},
	} {
		t.Run(tc.method, func(t *testing.T) {
			f := newFixture(t, SubscriptionConfig{})
			f.srv.FailNext(tc.method, tc.n, tc.code)
			for i := range tc.n {
				if err := tc.call(t, f); status.Code(err) != tc.code {
					t.Errorf("call %d = %v, want %v", i, err, tc.code)
				}
			}
			if err := tc.call(t, f); err != nil {
				t.Errorf("call after the faults = %v, want success", err)
			}
			want := MethodStats{Calls: int64(tc.n + 1), Errors: int64(tc.n), Injected: int64(tc.n)}
			if ms := f.srv.MethodStats(tc.method); ms.Calls != want.Calls || ms.Errors != want.Errors || ms.Injected != want.Injected {
				t.Errorf("stats = %+v, want %+v", ms, want)
			}
			if tc.method == "StreamingPull" {
				if n := len(f.srv.Streams("sub")); n != 1 {
					t.Errorf("%d streams recorded, want 1 (the failed one never opened)", n)
				}
			}
		})
	}
}

// bubbleFixture is a fixture over bufconn, for use inside a synctest bubble.
func bubbleFixture(t *testing.T, cfg SubscriptionConfig, opts ...Option) *fixture {
	return newFixture(t, cfg, append([]Option{WithBufconn()}, opts...)...)
}

// pump receives from a stream into a channel until the stream ends.
func pump(sp pubsubpb.Subscriber_StreamingPullClient) <-chan *pubsubpb.StreamingPullResponse {
	ch := make(chan *pubsubpb.StreamingPullResponse, 100)
	go func() {
		defer close(ch)
		for {
			resp, err := sp.Recv()
			if err != nil {
				return
			}
			ch <- resp
		}
	}()
	return ch
}

func TestSetLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := bubbleFixture(t, SubscriptionConfig{})
		ctx := context.Background()
		f.srv.SetLatency("Publish", 3*time.Second)
		start := time.Now()
		msg := &pubsubpb.PubsubMessage{Data: []byte("x")}
		if _, err := f.pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{msg}}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("Publish took %v, want 3s", d)
		}
		// A caller's deadline cuts the latency short.
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := f.pub.Publish(short, &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{msg}}); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("Publish with 1 s deadline = %v", err)
		}
		f.srv.SetLatency("Publish", 0)
		f.srv.SetLatency("StreamingPull", 2*time.Second)
		start = time.Now()
		sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10})
		recvN(t, sp, 1)
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("first message after %v, want 2s", d)
		}
	})
}

// StallEvery holds back the answer of exactly every k-th call for its
// duration; the call's messages are stored at once, and a caller's
// deadline ends the stall without undoing them.
func TestStallEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := bubbleFixture(t, SubscriptionConfig{})
		ctx := context.Background()
		f.srv.StallEvery("Publish", 3, 2*time.Second)
		req := &pubsubpb.PublishRequest{Topic: f.topic, Messages: []*pubsubpb.PubsubMessage{{Data: []byte("x")}}}
		var took []time.Duration
		for range 6 {
			start := time.Now()
			if _, err := f.pub.Publish(ctx, req); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		want := []time.Duration{0, 0, 2 * time.Second, 0, 0, 2 * time.Second}
		if fmt.Sprint(took) != fmt.Sprint(want) {
			t.Fatalf("calls took %v, want %v", took, want)
		}
		if st := f.srv.MethodStats("Publish"); st.Stalled != 2 || st.Calls != 6 {
			t.Fatalf("stats %+v, want 2 of 6 stalled", st)
		}
		// The 9th call stalls; its deadline ends it, its message stays.
		for range 2 {
			if _, err := f.pub.Publish(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if _, err := f.pub.Publish(short, req); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("stalled Publish with a 500 ms deadline = %v", err)
		}
		if got := f.srv.SubscriptionStats("sub").Published; got != 9 {
			t.Fatalf("server has %d messages, want 9", got)
		}
		f.srv.StallEvery("Publish", 0, 0)
		for range 3 {
			if _, err := f.pub.Publish(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if st := f.srv.MethodStats("Publish"); st.Stalled != 3 {
			t.Fatalf("%d stalled after the fault was removed, want 3", st.Stalled)
		}
	})
}

func TestStallStreamsByID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := bubbleFixture(t, SubscriptionConfig{})
		sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10, ProtocolVersion: 1})
		out := pump(sp)
		synctest.Wait()
		if f.srv.StallStreams(true, 1) != 1 || f.srv.StallStreams(true, 7) != 0 {
			t.Fatal("StallStreams results")
		}
		f.publish(t, 2, "")
		if err := sp.Send(&pubsubpb.StreamingPullRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second) // within the test streams' 30 s deadline
		synctest.Wait()
		if len(out) != 0 {
			t.Fatalf("stalled stream sent %d responses", len(out))
		}
		info := f.srv.Streams("")[0]
		if !info.Stalled || info.Heartbeats != 1 || info.Responses != 0 {
			t.Errorf("stream info = %+v", info)
		}
		f.srv.StallStreams(false, 1)
		resp := <-out
		if len(resp.ReceivedMessages) != 2 {
			t.Errorf("after resuming: %v", resp)
		}
		if info := f.srv.Streams("")[0]; info.Stalled {
			t.Errorf("stream info = %+v", info)
		}
	})
}

func TestStallStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := bubbleFixture(t, SubscriptionConfig{})
		f.srv.StallStreams(true) // also stalls streams opened later
		a := pump(f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10}))
		b := pump(f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10}))
		f.publish(t, 4, "")
		time.Sleep(20 * time.Second) // within the test streams' 30 s deadline
		synctest.Wait()
		if len(a)+len(b) != 0 || f.srv.SubscriptionStats("sub").Delivered != 0 {
			t.Fatal("stalled streams sent messages")
		}
		for _, info := range f.srv.Streams("sub") {
			if !info.Stalled {
				t.Errorf("stream %d opened after StallStreams(true) is not reported stalled", info.ID)
			}
		}
		f.srv.StallStreams(false)
		n := 0
		for n < 4 {
			select {
			case r := <-a:
				n += len(r.ReceivedMessages)
			case r := <-b:
				n += len(r.ReceivedMessages)
			}
		}
	})
}

func TestRestart(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	addr := f.srv.Addr()
	f.publish(t, 1, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10})
	m := recvN(t, sp, 1)[0]
	if err := f.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if f.srv.Addr() != addr {
		t.Errorf("address %s after restart, want %s", f.srv.Addr(), addr)
	}
	if _, err := sp.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("old stream Recv = %v, want UNAVAILABLE", err)
	}
	// The server's connection reconnects; state is kept: the message is
	// still out, and its ack id still works.
	if st := f.srv.SubscriptionStats("sub"); st.Outstanding != 1 || st.Streams != 1 {
		t.Errorf("stats after restart = %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: []string{m.AckId}}, grpcWaitForReady()); err != nil {
		t.Fatal(err)
	}
	f.publish(t, 1, "")
	recvN(t, f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10}), 1)

	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Restart(); !errors.Is(err, errClosed) {
		t.Errorf("Restart after Close = %v", err)
	}
	if err := f.srv.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestRestartBufconn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := bubbleFixture(t, SubscriptionConfig{})
		sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10})
		synctest.Wait()
		if err := f.srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("old stream Recv = %v, want UNAVAILABLE", err)
		}
		f.publish(t, 1, "")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sp2, err := f.sub.StreamingPull(ctx, grpcWaitForReady())
		if err != nil {
			t.Fatal(err)
		}
		if err := sp2.Send(&pubsubpb.StreamingPullRequest{Subscription: f.subn, StreamAckDeadlineSeconds: 10}); err != nil {
			t.Fatal(err)
		}
		recvN(t, sp2, 1)
	})
}

func TestDeleteSubscriptionEndsStreams(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10})
	waitFor(t, "stream", func() bool { return len(f.srv.Streams("sub")) == 1 })
	if err := deleteSub(f.srv, "sub"); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Recv(); status.Code(err) != codes.NotFound {
		t.Errorf("Recv = %v, want NOT_FOUND", err)
	}
	if err := deleteSub(f.srv, "sub"); status.Code(err) != codes.NotFound {
		t.Errorf("second delete = %v", err)
	}
}
