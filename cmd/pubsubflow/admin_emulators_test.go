package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/gcemu"
)

// The admin commands work the same against pubsubtest (what pubsubflow
// emulator serves) and Google's emulator: the same commands, the same exit
// codes, the same settings read back. Google's emulator accepts Seek but
// replays nothing (tried: neither to a time with retained acked messages
// nor to a snapshot), so there only the calls' success is checked.
func TestAdminCommandsOnEmulators(t *testing.T) {
	t.Run("pubsubtest", func(t *testing.T) {
		adminScenario(t, newAdminServer(t).Addr(), true)
	})
	t.Run("Google's emulator", func(t *testing.T) {
		adminScenario(t, gcemu.Start(t), false)
	})
}

// adminScenario runs the admin commands against addr; replays says
// whether the server replays messages on Seek.
func adminScenario(t *testing.T, addr string, replays bool) {
	const project = "emu-project"
	run := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		return cli(t, stdin, append(args, "--endpoint", addr, "--insecure", "--project", project)...)
	}
	ok := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := run("", args...)
		if code != exitOK {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
		}
		return stdout
	}
	fails := func(want string, args ...string) {
		t.Helper()
		code, stdout, stderr := run("", args...)
		if code != exitFailure || !strings.Contains(stderr, want) || stdout != "" {
			t.Fatalf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, stdout, stderr, want)
		}
	}
	tailIDs := func(sub string, n int) []string {
		t.Helper()
		var ids []string
		for _, l := range parseTail(t, ok("tail", sub, "--ack", "--max", strconv.Itoa(n), "--timeout", "30s")) {
			ids = append(ids, l.ID)
		}
		slices.Sort(ids)
		return ids
	}
	topic := "projects/" + project + "/topics/orders"

	ok("topics", "create", "orders", "--retention", "1d")
	ok("topics", "create", "orders-dead")
	fails("topic "+topic+" already exists at "+addr, "topics", "create", "orders")
	if tp := fromJSON(t, ok("topics", "get", "orders", "--json"), &pubsubpb.Topic{}); tp.GetMessageRetentionDuration().AsDuration() != 24*time.Hour {
		t.Fatalf("topics get: %v", tp)
	}
	topics := fromJSONList(t, ok("topics", "list", "--json"), func() *pubsubpb.Topic { return &pubsubpb.Topic{} })
	if len(topics) != 2 || topics[0].GetName() != topic {
		t.Fatalf("topics list: %v", topics)
	}

	ok("subscriptions", "create", "all-sub", "--topic", "orders", "--ack-deadline", "30s", "--ordering", "--exactly-once",
		"--dead-letter-topic", "orders-dead", "--max-delivery-attempts", "7", "--min-backoff", "1s", "--max-backoff", "1m",
		"--filter", `attributes.kind = "order"`, "--retain-acked", "--retention", "1d")
	s := fromJSON(t, ok("subscriptions", "get", "all-sub", "--json"), &pubsubpb.Subscription{})
	if s.GetTopic() != topic || s.GetAckDeadlineSeconds() != 30 || !s.GetEnableMessageOrdering() || !s.GetEnableExactlyOnceDelivery() ||
		s.GetDeadLetterPolicy().GetDeadLetterTopic() != "projects/"+project+"/topics/orders-dead" || s.GetDeadLetterPolicy().GetMaxDeliveryAttempts() != 7 ||
		s.GetRetryPolicy().GetMinimumBackoff().AsDuration() != time.Second || s.GetRetryPolicy().GetMaximumBackoff().AsDuration() != time.Minute ||
		s.GetFilter() != `attributes.kind = "order"` || !s.GetRetainAckedMessages() || s.GetMessageRetentionDuration().AsDuration() != 24*time.Hour {
		t.Fatalf("subscriptions get: %v", s)
	}
	ok("subscriptions", "create", "replay-sub", "--topic", "orders", "--retain-acked")
	subs := fromJSONList(t, ok("subscriptions", "list", "--json"), func() *pubsubpb.Subscription { return &pubsubpb.Subscription{} })
	if len(subs) != 2 || subs[0].GetName() != "projects/"+project+"/subscriptions/all-sub" || subs[1].GetName() != "projects/"+project+"/subscriptions/replay-sub" {
		t.Fatalf("subscriptions list: %v", subs)
	}
	fails("already exists at "+addr, "subscriptions", "create", "replay-sub", "--topic", "orders")
	fails("code = NotFound", "subscriptions", "create", "other-sub", "--topic", "nope")
	fails("code = NotFound", "subscriptions", "create", "other-sub", "--topic", "orders", "--dead-letter-topic", "nope")
	fails("subscription projects/"+project+"/subscriptions/nope not found at "+addr, "subscriptions", "get", "nope")

	// Replay by time and by snapshot.
	if code, stdout, stderr := run("one\ntwo\n", "publish", "orders"); code != exitOK || len(strings.Fields(stdout)) != 2 {
		t.Fatalf("publish: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	ok("snapshots", "create", "both-unacked", "--subscription", "replay-sub")
	first := tailIDs("replay-sub", 2)
	if len(first) != 2 {
		t.Fatalf("tail: %q", first)
	}
	ok("subscriptions", "seek", "replay-sub", "--time", "-1h")
	if replays {
		if got := tailIDs("replay-sub", 2); !slices.Equal(got, first) {
			t.Fatalf("after seek --time -1h: %q, want %q", got, first)
		}
	}
	ok("subscriptions", "seek", "replay-sub", "--snapshot", "both-unacked")
	if replays {
		if got := tailIDs("replay-sub", 2); !slices.Equal(got, first) {
			t.Fatalf("after seek --snapshot: %q, want %q", got, first)
		}
	}
	snaps := fromJSONList(t, ok("snapshots", "list", "--json"), func() *pubsubpb.Snapshot { return &pubsubpb.Snapshot{} })
	if len(snaps) != 1 || snaps[0].GetTopic() != topic {
		t.Fatalf("snapshots list: %v", snaps)
	}
	fails("snapshot projects/"+project+"/snapshots/both-unacked already exists at "+addr, "snapshots", "create", "both-unacked", "--subscription", "replay-sub")
	ok("snapshots", "delete", "both-unacked")
	fails("snapshot projects/"+project+"/snapshots/both-unacked not found at "+addr, "snapshots", "delete", "both-unacked")

	ok("subscriptions", "delete", "all-sub")
	fails("subscription projects/"+project+"/subscriptions/all-sub not found", "subscriptions", "delete", "all-sub")
	ok("topics", "delete", "orders")
	fails("topic "+topic+" not found at "+addr, "topics", "get", "orders")
	// The subscription outlives its topic.
	if s := fromJSON(t, ok("subscriptions", "get", "replay-sub", "--json"), &pubsubpb.Subscription{}); s.GetTopic() != "_deleted-topic_" {
		t.Fatalf("subscription of a deleted topic: %v", s)
	}
}
