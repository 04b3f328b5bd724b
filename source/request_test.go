package source

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/stage"
)

const testSub = "projects/p/subscriptions/sub"

// TestLaterRequestsCarryNothingInitialOnly: the service rejects a
// keepalive request that repeats an initial-only field. With max outstanding 100 / 10 MiB and a client id on the
// initial request and a 100 ms heartbeat, the first request keeps them and
// every later one is the zero value.
func TestLaterRequestsCarryNothingInitialOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &capturingClient{answer: true}
		src, err := Subscribe(client, Config{
			Subscription:           testSub,
			StreamAckDeadline:      60 * time.Second,
			ClientID:               "test-client",
			MaxOutstandingMessages: 100,
			MaxOutstandingBytes:    10 << 20,
			HeartbeatInterval:      100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		src.Run(g)
		time.Sleep(550 * time.Millisecond) // virtual: five heartbeats, at 100 ms … 500 ms
		synctest.Wait()
		g.Cancel()
		if err := g.Wait(); err != context.Canceled && err != nil {
			t.Fatal(err)
		}

		reqs := client.requests(0)
		if len(client.streams) != 1 {
			t.Fatalf("%d streams opened, want 1", len(client.streams))
		}
		first := reqs[0]
		if first.Subscription != testSub || first.StreamAckDeadlineSeconds != 60 || first.ClientId != "test-client" ||
			first.MaxOutstandingMessages != 100 || first.MaxOutstandingBytes != 10<<20 || first.ProtocolVersion != 1 {
			t.Fatalf("initial request = %v", first)
		}
		later := reqs[1:]
		if len(later) != 5 {
			t.Fatalf("%d later requests, want 5 heartbeats", len(later))
		}
		for i, r := range later {
			// The whole message, not a list of fields: a field added to
			// the request later must not slip through either.
			if !proto.Equal(r, &pubsubpb.StreamingPullRequest{}) {
				t.Errorf("later request %d = %v, want the zero value", i, r)
			}
		}
		if got := client.md[0].Get(requestParamsKey); len(got) != 1 || got[0] != "subscription=projects%2Fp%2Fsubscriptions%2Fsub" {
			t.Errorf("routing metadata = %q", got)
		}
	})
}

// TestDeadlineUpdateIsTheOnlyLaterField: SetStreamAckDeadline sends a
// request carrying only stream_ack_deadline_seconds, once.
func TestDeadlineUpdateIsTheOnlyLaterField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &capturingClient{answer: true}
		src, err := Subscribe(client, Config{Subscription: testSub, MaxOutstandingMessages: 5, ClientID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		g := stage.NewGroup(context.Background())
		src.Run(g)
		synctest.Wait()
		src.setStreamAckDeadline(95 * time.Second)
		synctest.Wait()
		time.Sleep(DefaultHeartbeatInterval) // one ordinary heartbeat
		synctest.Wait()
		g.Cancel()
		_ = g.Wait()
		reqs := client.requests(0)
		if len(reqs) != 3 {
			t.Fatalf("%d requests, want initial + update + heartbeat: %v", len(reqs), reqs)
		}
		if u := reqs[1]; u.StreamAckDeadlineSeconds != 95 || u.ClientId != "" || u.MaxOutstandingMessages != 0 || u.Subscription != "" {
			t.Errorf("update = %v, want only stream_ack_deadline_seconds 95", u)
		}
		if h := reqs[2]; h.StreamAckDeadlineSeconds != 0 {
			t.Errorf("heartbeat after the update = %v, want the zero value", h)
		}
		if src.StreamAckDeadline() != 95*time.Second {
			t.Errorf("StreamAckDeadline = %v", src.StreamAckDeadline())
		}
	})
}

func TestShare(t *testing.T) {
	for _, c := range []struct {
		limit int64
		n     int
		want  []int64
	}{
		{1000, 1, []int64{1000}},
		{1000, 4, []int64{250, 250, 250, 250}},
		{1001, 4, []int64{251, 250, 250, 250}},
		{3, 4, []int64{1, 1, 1, 1}}, // never 0, which would mean unlimited
		{-1, 3, []int64{0, 0, 0}},   // unlimited
	} {
		var sum int64
		for i, w := range c.want {
			got := share(c.limit, i, c.n)
			if got != w {
				t.Errorf("share(%d, %d, %d) = %d, want %d", c.limit, i, c.n, got, w)
			}
			sum += got
		}
		if c.limit >= int64(c.n) && sum != c.limit {
			t.Errorf("shares of %d among %d add up to %d", c.limit, c.n, sum)
		}
	}
}

func TestClientIDRandomOncePerSubscribe(t *testing.T) {
	a, _ := Subscribe(&capturingClient{}, Config{Subscription: testSub})
	b, _ := Subscribe(&capturingClient{}, Config{Subscription: testSub})
	if a.ClientID() == "" || a.ClientID() == b.ClientID() {
		t.Fatalf("client ids %q and %q: want distinct, non-empty", a.ClientID(), b.ClientID())
	}
	c, _ := Subscribe(&capturingClient{}, Config{Subscription: testSub, ClientID: "mine"})
	if c.ClientID() != "mine" {
		t.Fatalf("ClientID = %q, want mine", c.ClientID())
	}
}
