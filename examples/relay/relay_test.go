package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A publish that fails for good nacks its inputs instead of acking them;
// they are redelivered, relayed again and acked once, so the output holds
// every input exactly once.
func TestRelayNacksInputWhosePublishFailed(t *testing.T) {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 50
	opts, err := setup(ctx, srv, n)
	if err != nil {
		t.Fatal(err)
	}
	// Batches of exactly 10 (closed on count only: 50 inputs and the 10
	// redelivered ones are multiples of 10), one at a time: exactly the
	// first batch fails, for good (PERMISSION_DENIED is not retried).
	opts.Publisher = publisher.Config{MaxMessages: 10, Delay: time.Minute, MaxInFlightBatches: 1}
	srv.FailNext("Publish", 1, codes.PermissionDenied)
	var out bytes.Buffer
	if err := Run(ctx, &out, opts); err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out.String()))

	if srv.MethodStats("Publish").Injected != 1 {
		t.Fatal("the fault was not injected")
	}
	in := srv.SubscriptionStats(inputSub)
	if in.Nacked != 10 {
		t.Fatalf("%d inputs nacked, want the 10 of the failed batch: %+v", in.Nacked, in)
	}
	if in.Acked != n || in.Redelivered != in.Nacked {
		t.Fatalf("input stats %+v: want %d acks and one redelivery per nack", in, n)
	}
	// Every input was acked exactly once; the nacked ones were delivered
	// twice and acked only on the second delivery.
	resp, err := pubsubpb.NewSubscriberClient(srv.ClientConn()).Pull(ctx, &pubsubpb.PullRequest{Subscription: "projects/" + srv.Project() + "/subscriptions/" + outputSub, MaxMessages: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, rm := range resp.ReceivedMessages {
		m := rm.Message
		src := m.Attributes["source-id"]
		if seen[src] {
			t.Fatalf("input %s relayed twice", src)
		}
		seen[src] = true
		st := srv.MessageStats(src)
		if st.Acks != 1 {
			t.Fatalf("input %s acked %d times", src, st.Acks)
		}
		if !bytes.HasPrefix(m.Data, []byte("ORDER ")) {
			t.Fatalf("output %q not transformed", m.Data)
		}
	}
	if len(seen) != n {
		t.Fatalf("output holds %d distinct inputs, want %d", len(seen), n)
	}
	var redelivered int
	for id := range seen {
		if srv.MessageStats(id).Deliveries == 2 {
			redelivered++
		}
	}
	if int64(redelivered) != in.Nacked {
		t.Fatalf("%d inputs delivered twice, %d nacks", redelivered, in.Nacked)
	}
}

// The program's default run (embedded server) relays everything.
func TestRunEmbedded(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := runEmbedded(ctx, &out, 200); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "input: 200 published, 200 acked, 0 nacked; output: 200 published") {
		t.Fatalf("output:\n%s", out.String())
	}
}
