package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// newAdminServer is an empty loopback pubsubtest server.
func newAdminServer(t testing.TB, opts ...pubsubtest.Option) *pubsubtest.Server {
	t.Helper()
	srv, err := pubsubtest.NewServer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// admin runs an admin command against srv with project "test-project".
func admin(t testing.TB, srv *pubsubtest.Server, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cli(t, "", append(args, "--endpoint", srv.Addr(), "--insecure", "--project", "test-project")...)
}

// mustAdmin runs an admin command that must succeed and returns its
// output.
func mustAdmin(t testing.TB, srv *pubsubtest.Server, args ...string) string {
	t.Helper()
	code, stdout, stderr := admin(t, srv, args...)
	if code != exitOK || stderr != "" {
		t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
	}
	return stdout
}

// wantFailure checks that an admin command failed at run time (exit 1)
// with want in its message.
func wantFailure(t testing.TB, srv *pubsubtest.Server, want string, args ...string) {
	t.Helper()
	code, stdout, stderr := admin(t, srv, args...)
	if code != exitFailure || !strings.Contains(stderr, want) || stdout != "" {
		t.Fatalf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, stdout, stderr, want)
	}
}

// fromJSON decodes the API JSON a command printed.
func fromJSON[M proto.Message](t testing.TB, out string, m M) M {
	t.Helper()
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("JSON %q: %v", out, err)
	}
	return m
}

// fromJSONList decodes a JSON array of API resources.
func fromJSONList[M proto.Message](t testing.TB, out string, newM func() M) []M {
	t.Helper()
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not a JSON array: %q: %v", out, err)
	}
	items := make([]M, 0, len(raw))
	for _, r := range raw {
		items = append(items, fromJSON(t, string(r), newM()))
	}
	return items
}

// topics create, get, list and delete, in tables and in JSON, with the
// service's errors: ALREADY_EXISTS and NOT_FOUND exit 1 naming the topic.
func TestTopicsCommands(t *testing.T) {
	srv := newAdminServer(t)
	out := mustAdmin(t, srv, "topics", "create", "orders")
	if !strings.Contains(out, "name               projects/test-project/topics/orders") {
		t.Fatalf("create output:\n%s", out)
	}
	out = mustAdmin(t, srv, "topics", "create", "projects/test-project/topics/audit", "--retention", "2d", "--json")
	if tp := fromJSON(t, out, &pubsubpb.Topic{}); tp.GetName() != "projects/test-project/topics/audit" || tp.GetMessageRetentionDuration().AsDuration() != 48*time.Hour {
		t.Fatalf("create --json: %v", tp)
	}
	// The server has what the command said.
	got, err := pubsubpb.NewPublisherClient(srv.ClientConn()).GetTopic(context.Background(), &pubsubpb.GetTopicRequest{Topic: "projects/test-project/topics/audit"})
	if err != nil || got.GetMessageRetentionDuration().AsDuration() != 48*time.Hour {
		t.Fatalf("server's topic: %v, %v", got, err)
	}
	wantFailure(t, srv, "topic projects/test-project/topics/orders already exists at "+srv.Addr(), "topics", "create", "orders")

	out = mustAdmin(t, srv, "topics", "get", "audit")
	if !strings.Contains(out, "projects/test-project/topics/audit") || !strings.Contains(out, "message retention  2d") {
		t.Fatalf("get output:\n%s", out)
	}
	out = mustAdmin(t, srv, "topics", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TOPIC") || !strings.HasPrefix(lines[1], "audit ") ||
		!strings.Contains(lines[1], "2d") || !strings.HasPrefix(lines[2], "orders ") {
		t.Fatalf("list output:\n%s", out)
	}
	list := fromJSONList(t, mustAdmin(t, srv, "topics", "list", "--json"), func() *pubsubpb.Topic { return &pubsubpb.Topic{} })
	if len(list) != 2 || list[0].GetName() != "projects/test-project/topics/audit" || list[1].GetName() != "projects/test-project/topics/orders" {
		t.Fatalf("list --json: %v", list)
	}

	if out := mustAdmin(t, srv, "topics", "delete", "orders"); out != "deleted topic projects/test-project/topics/orders\n" {
		t.Fatalf("delete output %q", out)
	}
	if out := mustAdmin(t, srv, "topics", "delete", "audit", "--json"); strings.Join(strings.Fields(out), "") != `{"deleted":"projects/test-project/topics/audit"}` {
		t.Fatalf("delete --json output %q", out)
	}
	wantFailure(t, srv, "topic projects/test-project/topics/orders not found at "+srv.Addr(), "topics", "get", "orders")
	wantFailure(t, srv, "topic projects/test-project/topics/orders not found", "topics", "delete", "orders")
	if out := mustAdmin(t, srv, "topics", "list"); out != "no topics in projects/test-project\n" {
		t.Fatalf("empty list %q", out)
	}
	if out := mustAdmin(t, srv, "topics", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty list --json %q", out)
	}
}

// subscriptions create sends every flag's field, as the server then
// reports it; get, list and delete show and remove it.
func TestSubscriptionsCommands(t *testing.T) {
	srv := newAdminServer(t)
	mustAdmin(t, srv, "topics", "create", "orders")
	mustAdmin(t, srv, "topics", "create", "orders-dead")

	out := mustAdmin(t, srv, "subscriptions", "create", "orders-sub", "--topic", "orders", "--ack-deadline", "30s",
		"--ordering", "--exactly-once", "--dead-letter-topic", "orders-dead", "--max-delivery-attempts", "7",
		"--min-backoff", "1s", "--max-backoff", "1m", "--filter", `attributes.kind = "order"`,
		"--retain-acked", "--retention", "1d", "--json")
	want := &pubsubpb.Subscription{
		Name:                      "projects/test-project/subscriptions/orders-sub",
		Topic:                     "projects/test-project/topics/orders",
		AckDeadlineSeconds:        30,
		EnableMessageOrdering:     true,
		EnableExactlyOnceDelivery: true,
		DeadLetterPolicy:          &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "projects/test-project/topics/orders-dead", MaxDeliveryAttempts: 7},
		Filter:                    `attributes.kind = "order"`,
		RetainAckedMessages:       true,
	}
	checkSub := func(what string, got *pubsubpb.Subscription) {
		t.Helper()
		if got.GetName() != want.Name || got.GetTopic() != want.Topic || got.GetAckDeadlineSeconds() != want.AckDeadlineSeconds ||
			!got.GetEnableMessageOrdering() || !got.GetEnableExactlyOnceDelivery() ||
			!proto.Equal(got.GetDeadLetterPolicy(), want.DeadLetterPolicy) || got.GetFilter() != want.Filter ||
			!got.GetRetainAckedMessages() || got.GetMessageRetentionDuration().AsDuration() != 24*time.Hour ||
			got.GetRetryPolicy().GetMinimumBackoff().AsDuration() != time.Second ||
			got.GetRetryPolicy().GetMaximumBackoff().AsDuration() != time.Minute {
			t.Fatalf("%s: %v", what, got)
		}
	}
	checkSub("create --json", fromJSON(t, out, &pubsubpb.Subscription{}))
	got, err := pubsubpb.NewSubscriberClient(srv.ClientConn()).GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: want.Name})
	if err != nil {
		t.Fatal(err)
	}
	checkSub("the server's subscription", got)
	checkSub("get --json", fromJSON(t, mustAdmin(t, srv, "subscriptions", "get", "orders-sub", "--json"), &pubsubpb.Subscription{}))

	out = mustAdmin(t, srv, "subscriptions", "get", "orders-sub")
	for _, row := range []string{
		"ack deadline           30s",
		"message ordering       yes",
		"exactly-once delivery  yes",
		"dead-letter topic      projects/test-project/topics/orders-dead",
		"max delivery attempts  7",
		"retry backoff          1s – 1m",
		`filter                 attributes.kind = "order"`,
		"retain acked           yes",
		"message retention      1d",
	} {
		if !strings.Contains(out, row+"\n") {
			t.Errorf("get output lacks %q:\n%s", row, out)
		}
	}

	// Defaults: the service's ack deadline; a dead-letter topic alone
	// means 5 attempts; one backoff alone takes the other's default.
	plain := fromJSON(t, mustAdmin(t, srv, "subscriptions", "create", "plain-sub", "--topic", "orders", "--json"), &pubsubpb.Subscription{})
	if plain.GetAckDeadlineSeconds() != 10 || plain.GetDeadLetterPolicy() != nil || plain.GetRetryPolicy() != nil || plain.GetFilter() != "" {
		t.Fatalf("plain subscription: %v", plain)
	}
	dl := fromJSON(t, mustAdmin(t, srv, "subscriptions", "create", "dl-sub", "--topic", "orders", "--dead-letter-topic",
		"projects/test-project/topics/orders-dead", "--max-backoff", "30s", "--json"), &pubsubpb.Subscription{})
	if dl.GetDeadLetterPolicy().GetMaxDeliveryAttempts() != 5 || dl.GetRetryPolicy().GetMinimumBackoff().AsDuration() != 10*time.Second ||
		dl.GetRetryPolicy().GetMaximumBackoff().AsDuration() != 30*time.Second {
		t.Fatalf("defaults: %v", dl)
	}

	out = mustAdmin(t, srv, "subscriptions", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "SUBSCRIPTION") ||
		!strings.HasPrefix(lines[2], "orders-sub ") || !strings.Contains(lines[2], "dead-letter orders-dead after 7") ||
		!strings.Contains(lines[2], "ordering, exactly-once") || !strings.HasPrefix(lines[3], "plain-sub ") || !strings.HasSuffix(lines[3], " -") {
		t.Fatalf("list output:\n%s", out)
	}
	list := fromJSONList(t, mustAdmin(t, srv, "subscriptions", "list", "--json"), func() *pubsubpb.Subscription { return &pubsubpb.Subscription{} })
	if len(list) != 3 || list[1].GetName() != want.Name {
		t.Fatalf("list --json: %v", list)
	}

	wantFailure(t, srv, "subscription projects/test-project/subscriptions/orders-sub already exists at "+srv.Addr(),
		"subscriptions", "create", "orders-sub", "--topic", "orders")
	// A missing topic: the service's message names it.
	wantFailure(t, srv, "resource=projects/test-project/topics/nope", "subscriptions", "create", "new-sub", "--topic", "nope")
	wantFailure(t, srv, "subscription projects/test-project/subscriptions/nope not found at "+srv.Addr(), "subscriptions", "get", "nope")

	if out := mustAdmin(t, srv, "subscriptions", "delete", "orders-sub"); out != "deleted subscription projects/test-project/subscriptions/orders-sub\n" {
		t.Fatalf("delete output %q", out)
	}
	wantFailure(t, srv, "subscription projects/test-project/subscriptions/orders-sub not found", "subscriptions", "delete", "orders-sub")
	if _, err := pubsubpb.NewSubscriberClient(srv.ClientConn()).GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: want.Name}); err == nil {
		t.Fatal("the subscription is still on the server")
	}
}

// A refusal by the service (INVALID_ARGUMENT) is a failure, exit 1, with
// the service's reason; an unreachable endpoint too, reported at once.
func TestAdminServiceErrors(t *testing.T) {
	srv := newAdminServer(t, pubsubtest.WithMinAckDeadline(10*time.Second))
	mustAdmin(t, srv, "topics", "create", "orders")
	wantFailure(t, srv, "code = InvalidArgument", "subscriptions", "create", "fast-sub", "--topic", "orders", "--ack-deadline", "5s")

	addr := closedAddr(t)
	start := time.Now()
	code, _, stderr := cli(t, "", "topics", "list", "--project", "p-1", "--endpoint", addr, "--insecure")
	if code != exitFailure || !strings.Contains(stderr, "cannot reach "+addr) {
		t.Fatalf("unreachable: exit %d, stderr %q", code, stderr)
	}
	if el := time.Since(start); el > 9*time.Second {
		t.Fatalf("an unreachable endpoint took %v to report", el)
	}
}

// Every admin command documents every flag in --help, and a bad
// invocation exits 2, naming what is wrong, before any call.
func TestAdminUsage(t *testing.T) {
	for _, g := range commandsIn(groupAdmin) {
		for _, help := range [][]string{{g.Name(), "--help"}, {g.Name(), "help"}, {"help", g.Name()}} {
			code, stdout, stderr := cli(t, "", help...)
			if code != exitOK || !strings.Contains(stdout, "Usage: pubsubflow "+g.Name()) || stderr != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q", help, code, stdout, stderr)
			}
			for _, v := range g.Commands() {
				if !strings.Contains(stdout, "  "+v.Name()+" ") {
					t.Errorf("%q does not list %q:\n%s", help, v.Name(), stdout)
				}
			}
		}
		for _, v := range g.Commands() {
			for _, help := range [][]string{{g.Name(), v.Name(), "--help"}, {g.Name(), "help", v.Name()}, {"help", g.Name(), v.Name()}} {
				code, stdout, stderr := cli(t, "", help...)
				if code != exitOK || !strings.Contains(stdout, "Usage: pubsubflow "+g.Name()+" "+v.Name()) || stderr != "" {
					t.Errorf("%q: exit %d, stdout %q, stderr %q", help, code, stdout, stderr)
				}
				for _, fs := range []*pflag.FlagSet{v.LocalFlags(), v.InheritedFlags()} {
					fs.VisitAll(func(f *pflag.Flag) {
						if !strings.Contains(stdout, "--"+f.Name+" ") && !strings.Contains(stdout, "--"+f.Name+"\n") {
							t.Errorf("%s %s --help does not document --%s", g.Name(), v.Name(), f.Name)
						}
					})
				}
			}
		}
	}
	if code, stdout, _ := cli(t, "", "--help"); code != exitOK || !strings.Contains(stdout, "subscriptions") || !strings.Contains(stdout, "snapshots") {
		t.Fatalf("pubsubflow --help does not list the admin commands:\n%s", stdout)
	}

	t.Setenv("PUBSUB_PROJECT_ID", "")
	t.Setenv("GOOGLE_CLOUD_PROJECT", "")
	t.Setenv("CLOUDSDK_CORE_PROJECT", "")
	const sub = "projects/p-1/subscriptions/sub-a"
	create := func(extra ...string) []string {
		return append([]string{"subscriptions", "create", sub, "--topic", "projects/p-1/topics/top-a"}, extra...)
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"topics"}, "missing command"},
		{[]string{"topics", "frob"}, `unknown command "frob"`},
		{[]string{"topics", "create"}, "missing TOPIC"},
		{[]string{"topics", "create", "a-topic", "b-topic"}, "unexpected arguments"},
		{[]string{"topics", "create", "top-a"}, "no project is set"},
		{[]string{"topics", "create", "projects/p-1/subscriptions/top-a"}, "want projects/PROJECT/topics/ID"},
		{[]string{"topics", "create", "projects/p-1/topics/goog-a"}, "bad id"},
		{[]string{"topics", "create", "projects/p-1/topics/top-a", "--retention", "5m"}, "--retention 5m: want 10m–31d"},
		{[]string{"topics", "create", "projects/p-1/topics/top-a", "--retention", "32d"}, "--retention 32d: want 10m–31d"},
		{[]string{"topics", "create", "projects/p-1/topics/top-a", "--retention", "soon"}, "want a duration"},
		{[]string{"topics", "get", "projects/p-1/topics/top-a", "--insecure"}, "--insecure needs --endpoint"},
		{[]string{"topics", "list"}, "no project is set"},
		{[]string{"topics", "list", "--project", "Bad_Project"}, `bad project id "Bad_Project"`},
		{[]string{"topics", "list", "--project", "p-1", "extra"}, "unexpected arguments"},
		{[]string{"topics", "delete"}, "missing TOPIC"},
		{[]string{"subscriptions"}, "missing command"},
		{[]string{"subscriptions", "create", sub}, "missing --topic"},
		{[]string{"subscriptions", "create", "--topic", "projects/p-1/topics/top-a"}, "missing SUBSCRIPTION"},
		{create("--ack-deadline", "601s"), "--ack-deadline 10m1s: want 1s–10m"},
		{create("--ack-deadline", "1500ms"), "--ack-deadline 1.5s: want whole seconds"},
		{create("--max-delivery-attempts", "5"), "--max-delivery-attempts needs --dead-letter-topic"},
		{create("--dead-letter-topic", "projects/p-1/topics/dead", "--max-delivery-attempts", "4"), "--max-delivery-attempts 4: want 5–100"},
		{create("--dead-letter-topic", "projects/p-1/topics/dead", "--max-delivery-attempts", "101"), "--max-delivery-attempts 101: want 5–100"},
		{create("--dead-letter-topic", "projects/p-1/topics/dead", "--max-delivery-attempts", "many"), "want an integer"},
		{create("--dead-letter-topic", "dead"), "no project is set"},
		{create("--min-backoff", "11m"), "--min-backoff 11m: want 0s–10m"},
		{create("--max-backoff", "-1s"), "--max-backoff -1s: want 0s–10m"},
		{create("--min-backoff", "30s", "--max-backoff", "20s"), "--min-backoff 30s is above --max-backoff 20s"},
		{create("--max-backoff", "5s"), "--min-backoff 10s is above --max-backoff 5s"},
		{create("--filter", strings.Repeat("x", 257)), "--filter is 257 bytes: want at most 256"},
		{create("--filter", "attributes.k = \"\xff\""), "--filter is not valid UTF-8"},
		{create("--retention", "9m"), "--retention 9m: want 10m–7d"},
		{create("--retention", "8d"), "--retention 8d: want 10m–7d"},
		{create("--ordering=maybe"), "invalid boolean value"},
		{[]string{"subscriptions", "get"}, "missing SUBSCRIPTION"},
		{[]string{"subscriptions", "list"}, "no project is set"},
		{[]string{"subscriptions", "delete", "projects/p-1/topics/top-a"}, "want projects/PROJECT/subscriptions/ID"},
		{[]string{"subscriptions", "seek", sub}, "want one of --time or --snapshot"},
		{[]string{"subscriptions", "seek", sub, "--time", "now", "--snapshot", "projects/p-1/snapshots/snap-a"}, "want one of --time or --snapshot"},
		{[]string{"subscriptions", "seek", sub, "--time", "yesterday"}, `--time "yesterday": want RFC 3339`},
		{[]string{"subscriptions", "seek", sub, "--time", "-soon"}, `--time "-soon"`},
		{[]string{"subscriptions", "seek", sub, "--snapshot", "projects/p-1/topics/snap-a"}, "want projects/PROJECT/snapshots/ID"},
		{[]string{"snapshots"}, "missing command"},
		{[]string{"snapshots", "create", "projects/p-1/snapshots/snap-a"}, "missing --subscription"},
		{[]string{"snapshots", "create", "--subscription", sub}, "missing SNAPSHOT"},
		{[]string{"snapshots", "list"}, "no project is set"},
		{[]string{"snapshots", "delete", "projects/p-1/snapshots/x"}, "bad id"},
		{[]string{"tail", sub, "--ack", "--nack"}, "--ack and --nack: want at most one"},
	}
	for _, b := range bad {
		code, stdout, stderr := cli(t, "", b.args...)
		if code != exitUsage || !strings.Contains(stderr, b.want) || stdout != "" {
			t.Errorf("%q: exit %d, stderr %q (stdout %q); want exit 2 and %q", b.args, code, stderr, stdout, b.want)
		}
	}
}

// Durations take Go's form or whole days, and print briefly.
func TestDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "0d": 0, "90s": 90 * time.Second, "1h30m": 90 * time.Minute} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "1.5d", "-1d", "7 d", "1e3d", "soon"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q): no error", in)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 48 * time.Hour: "2d", time.Hour: "1h", 10 * time.Minute: "10m",
		90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 25 * time.Hour: "25h"} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q; want %q", d, got, want)
		}
	}
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Time{"now": now, "-1h": now.Add(-time.Hour), "-2d": now.Add(-48 * time.Hour),
		"2026-01-01T00:00:00Z": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if got, err := parseSeekTime(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSeekTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}
