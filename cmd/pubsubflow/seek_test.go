package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// tailIDs runs tail --ack for n messages and returns their ids, sorted.
func tailIDs(t testing.TB, srv *pubsubtest.Server, sub string, n int) []string {
	t.Helper()
	code, stdout, stderr := admin(t, srv, "tail", sub, "--ack", "--max", strconv.Itoa(n), "--timeout", "20s")
	if code != exitOK {
		t.Fatalf("tail: exit %d, stderr %q", code, stderr)
	}
	var ids []string
	for _, l := range parseTail(t, stdout) {
		ids = append(ids, l.ID)
	}
	slices.Sort(ids)
	return ids
}

// publishN publishes n messages to topic and returns their ids, sorted.
func publishN(t testing.TB, srv *pubsubtest.Server, topic string, n int) []string {
	t.Helper()
	var msgs []*pubsubpb.PubsubMessage
	for range n {
		msgs = append(msgs, &pubsubpb.PubsubMessage{Data: []byte("m")})
	}
	ids, err := srv.Publish(context.Background(), topic, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// subscriptions seek --time replays the acked messages a subscription
// retains and "--time now" skips its backlog; snapshots create, list and
// delete, and seek --snapshot restores the acks of the snapshot; missing
// and duplicate snapshots are failures (exit 1) naming them.
func TestSeekAndSnapshots(t *testing.T) {
	srv := newAdminServer(t)
	topic := "projects/test-project/topics/orders"
	mustAdmin(t, srv, "topics", "create", "orders")
	mustAdmin(t, srv, "subscriptions", "create", "orders-sub", "--topic", "orders", "--retain-acked", "--retention", "1h")

	first := publishN(t, srv, topic, 3)
	if got := tailIDs(t, srv, "orders-sub", 3); !slices.Equal(got, first) {
		t.Fatalf("first tail: %q, want %q", got, first)
	}
	out := mustAdmin(t, srv, "subscriptions", "seek", "orders-sub", "--time", "-1h")
	if !strings.Contains(out, "sought to time") {
		t.Fatalf("seek output:\n%s", out)
	}
	if got := tailIDs(t, srv, "orders-sub", 3); !slices.Equal(got, first) {
		t.Fatalf("after seek to an hour ago: %q, want the acked %q again", got, first)
	}

	// A snapshot now holds nothing unacked; what is published after it
	// is unacked in it.
	out = mustAdmin(t, srv, "snapshots", "create", "before-second", "--subscription", "orders-sub")
	if !strings.Contains(out, "name     projects/test-project/snapshots/before-second\n") || !strings.Contains(out, "topic    "+topic+"\n") {
		t.Fatalf("snapshots create output:\n%s", out)
	}
	second := publishN(t, srv, topic, 2)
	if got := tailIDs(t, srv, "orders-sub", 2); !slices.Equal(got, second) {
		t.Fatalf("second tail: %q, want %q", got, second)
	}
	out = mustAdmin(t, srv, "subscriptions", "seek", "orders-sub", "--snapshot", "before-second", "--json")
	if strings.Join(strings.Fields(out), "") != `{"snapshot":"projects/test-project/snapshots/before-second","subscription":"projects/test-project/subscriptions/orders-sub"}` {
		t.Fatalf("seek --json output %q", out)
	}
	if got := tailIDs(t, srv, "orders-sub", 2); !slices.Equal(got, second) {
		t.Fatalf("after seek to the snapshot: %q, want %q again", got, second)
	}

	// "now" acks the backlog: nothing is left to deliver.
	publishN(t, srv, topic, 2)
	mustAdmin(t, srv, "subscriptions", "seek", "orders-sub", "--time", "now")
	if st := srv.SubscriptionStats("projects/test-project/subscriptions/orders-sub"); st.Backlog != 0 || st.Outstanding != 0 {
		t.Fatalf("after seek to now: %+v; want no backlog", st)
	}

	out = mustAdmin(t, srv, "snapshots", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "SNAPSHOT") || !strings.HasPrefix(lines[1], "before-second  orders  ") {
		t.Fatalf("snapshots list output:\n%s", out)
	}
	list := fromJSONList(t, mustAdmin(t, srv, "snapshots", "list", "--json"), func() *pubsubpb.Snapshot { return &pubsubpb.Snapshot{} })
	if len(list) != 1 || list[0].GetName() != "projects/test-project/snapshots/before-second" || list[0].GetTopic() != topic || list[0].GetExpireTime() == nil {
		t.Fatalf("snapshots list --json: %v", list)
	}
	wantFailure(t, srv, "snapshot projects/test-project/snapshots/before-second already exists at "+srv.Addr(),
		"snapshots", "create", "before-second", "--subscription", "orders-sub")
	wantFailure(t, srv, "resource=projects/test-project/subscriptions/nope", "snapshots", "create", "other", "--subscription", "nope")
	wantFailure(t, srv, "resource=projects/test-project/snapshots/nope", "subscriptions", "seek", "orders-sub", "--snapshot", "nope")
	wantFailure(t, srv, "resource=projects/test-project/subscriptions/nope", "subscriptions", "seek", "nope", "--time", "now")

	if out := mustAdmin(t, srv, "snapshots", "delete", "before-second"); out != "deleted snapshot projects/test-project/snapshots/before-second\n" {
		t.Fatalf("snapshots delete output %q", out)
	}
	wantFailure(t, srv, "snapshot projects/test-project/snapshots/before-second not found at "+srv.Addr(), "snapshots", "delete", "before-second")
	if out := mustAdmin(t, srv, "snapshots", "list"); out != "no snapshots in projects/test-project\n" {
		t.Fatalf("empty snapshots list %q", out)
	}
}

// subscriptions create with a dead-letter topic that does not exist is
// NOT_FOUND, exit 1, naming it.
func TestSubscriptionsCreateMissingDeadLetterTopic(t *testing.T) {
	srv := newAdminServer(t)
	mustAdmin(t, srv, "topics", "create", "orders")
	wantFailure(t, srv, "resource=projects/test-project/topics/no-dead", "subscriptions", "create", "new-sub", "--topic", "orders", "--dead-letter-topic", "no-dead")
}
