package source

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestWatchdogQuietOnServerThatNeverAnswers: against a server that never
// answers heartbeats (as Google's emulator), a stream stays open for ten
// minutes — idle, then busy, then with a deadline change that sends a
// heartbeat at once, then idle again — and is never torn down.
func TestWatchdogQuietOnServerThatNeverAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{}, pubsubtest.WithoutHeartbeatAnswers())
		var rec recorder
		src, err := Subscribe(h.client, Config{Subscription: h.sub, events: rec.record})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		out := src.Run(g)

		time.Sleep(100 * time.Second) // idle past three heartbeats
		h.publish(t, 500, 10)
		for range 500 {
			<-out
		}
		src.setStreamAckDeadline(2 * time.Minute) // a heartbeat right after the messages
		time.Sleep(10 * time.Minute)
		synctest.Wait()

		streams := h.srv.Streams(h.sub)
		if len(streams) != 1 || !streams[0].Open {
			t.Fatalf("streams = %+v, want the one stream still open", streams)
		}
		if st := streams[0]; st.Heartbeats < 23 || st.HeartbeatReplies != 0 || st.ProtocolVersion != 1 {
			t.Fatalf("heartbeats %d, replies %d, protocol %d: want ≥ 23 unanswered heartbeats with protocol_version 1",
				st.Heartbeats, st.HeartbeatReplies, st.ProtocolVersion)
		}
		if d := rec.of(event.Disconnect); len(d) != 0 {
			t.Fatalf("disconnects %+v, want none", d)
		}
		g.Cancel()
		_ = g.Wait()
	})
}

// TestWatchdogRestartsSilentStreamOnceAnswered: a server that answered the
// first heartbeat (at 30 s) and then goes silent has its stream restarted
// 15 s after the next unanswered one (60 s + 15 s). The Source remembers
// that this server answers: the next stream, silent from its start, is
// watched from its very first heartbeat.
func TestWatchdogRestartsSilentStreamOnceAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, pubsubtest.SubscriptionConfig{})
		var rec recorder
		src, err := Subscribe(h.client, Config{Subscription: h.sub, events: rec.record})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if st := h.srv.Streams(h.sub)[0]; st.HeartbeatReplies != 1 {
			t.Fatalf("stream 1 after 31 s: %+v, want its first heartbeat answered", st)
		}
		if h.srv.StallStreams(true, 1) != 1 {
			t.Fatal("stream 1 not open")
		}
		time.Sleep(74*time.Second - time.Since(start))
		synctest.Wait()
		if n := len(h.srv.Streams(h.sub)); n != 1 {
			t.Fatalf("%d streams before the timeout, want 1", n)
		}
		time.Sleep(2 * time.Second) // past 75 s and the first backoff delay (≤ 100 ms)
		synctest.Wait()
		if h.srv.StallStreams(true, 2) != 1 {
			t.Fatalf("no second stream after the watchdog fired: %+v", h.srv.Streams(h.sub))
		}
		time.Sleep(50 * time.Second)
		synctest.Wait()
		h.publish(t, 1, 10)
		if m := <-out; m == nil { // delivered on a third stream
			t.Fatal("output closed")
		}

		streams := h.srv.Streams(h.sub)
		if len(streams) != 3 || streams[0].Open || streams[1].Open || !streams[2].Open ||
			streams[1].ClientID != streams[0].ClientID || streams[2].ClientID != streams[0].ClientID {
			t.Fatalf("streams = %+v, want two silent ones closed and a third open, one client id", streams)
		}
		d, c := rec.of(event.Disconnect), rec.of(event.Connect)
		if len(d) != 2 || len(c) != 3 {
			t.Fatalf("disconnects %+v, connects %+v: want 2 and 3", d, c)
		}
		for _, e := range d {
			if status.Code(e.Err) != codes.DeadlineExceeded {
				t.Fatalf("disconnect %+v, want DEADLINE_EXCEEDED", e)
			}
		}
		if at := d[0].at.Sub(start); at != 75*time.Second {
			t.Fatalf("first stream killed at %v, want 75s (heartbeat at 60 s + 15 s)", at)
		}
		if after := d[1].at.Sub(c[1].at); after != 45*time.Second {
			t.Fatalf("second stream killed %v after it opened, want 45s (its first heartbeat at 30 s + 15 s)", after)
		}
		g.Cancel()
		_ = g.Wait()
	})
}

// TestReceiptDeadlineIsTheStreamsLowest: the client raises its stream ack
// deadline from 10 s to 60 s on an open stream, and the server delivers a
// message before it applied the heartbeat that announced 60 s. The
// message's deadline is receipt plus 10 s, the lowest the stream
// announced, not 60 s: a client that assumed the longer one would hold the
// message past the server's deadline, when the server may give it out
// again. The heartbeat carrying 60 s does reach the server.
func TestReceiptDeadlineIsTheStreamsLowest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		announced := make(chan int32, 4)
		deliver := make(chan struct{})
		f := &scripted{script: func(_ int, ss pubsubpb.Subscriber_StreamingPullServer) error {
			go func() {
				for {
					req, err := ss.Recv()
					if err != nil {
						return
					}
					announced <- req.StreamAckDeadlineSeconds
				}
			}()
			<-deliver
			if err := ss.Send(&pubsubpb.StreamingPullResponse{ReceivedMessages: []*pubsubpb.ReceivedMessage{
				{AckId: "a1", Message: &pubsubpb.PubsubMessage{MessageId: "1", Data: []byte("x")}},
			}}); err != nil {
				return err
			}
			return holdOpen(ss)
		}}
		src, err := Subscribe(serveScripted(t, f), Config{Subscription: "projects/p/subscriptions/sub", Streams: 1, StreamAckDeadline: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		out := src.Run(g)
		if d := <-announced; d != 10 {
			t.Fatalf("the initial request announced %d s, want 10", d)
		}
		src.setStreamAckDeadline(time.Minute)
		synctest.Wait() // the heartbeat is sent (and read); this server ignores it
		close(deliver)
		m := <-out
		if got, want := m.st.Deadline().Sub(m.ReceiveTime), 10*time.Second; got != want {
			t.Fatalf("receipt deadline %v after receipt, want %v", got, want)
		}
		if d := <-announced; d != 60 {
			t.Fatalf("the heartbeat announced %d s, want 60", d)
		}
		m.Ack()
		g.Cancel()
		for range out {
		}
		_ = g.Wait()
		if err := src.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
