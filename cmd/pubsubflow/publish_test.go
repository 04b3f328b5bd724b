package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// pullAll pulls everything the subscription has, without acking.
func (s *testServer) pullAll(t testing.TB) []*pubsubpb.PubsubMessage {
	t.Helper()
	resp, err := pubsubpb.NewSubscriberClient(s.srv.ClientConn()).Pull(context.Background(), &pubsubpb.PullRequest{Subscription: s.sub, MaxMessages: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pubsubpb.PubsubMessage
	for _, rm := range resp.ReceivedMessages {
		out = append(out, rm.Message)
	}
	slices.SortFunc(out, func(a, b *pubsubpb.PubsubMessage) int { return strings.Compare(a.MessageId, b.MessageId) })
	return out
}

// publish prints one id per published line, in order; empty lines are
// skipped without attributes.
func TestPublishLines(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	code, stdout, stderr := cli(t, "first\nsecond\n\nthird", append([]string{"publish", s.topic}, s.endpoint()...)...)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	ids := strings.Fields(stdout)
	got := s.pullAll(t)
	if len(ids) != 3 || len(got) != 3 {
		t.Fatalf("ids %q, %d messages on the server", ids, len(got))
	}
	for i, want := range []string{"first", "second", "third"} {
		if got[i].MessageId != ids[i] || string(got[i].Data) != want {
			t.Errorf("message %d: id %s data %q; want id %s data %q", i, got[i].MessageId, got[i].Data, ids[i], want)
		}
	}
}

// --attr and --ordering-key apply to every message; with attributes an
// empty line is a message too.
func TestPublishAttributesAndOrderingKey(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	args := append([]string{"publish", "topic-a", "--project", "test-project", "--attr", "source=cli", "--attr", "n=1", "--ordering-key", "key-1"}, s.endpoint()...)
	code, stdout, stderr := cli(t, "a\n\nb\n", args...)
	if code != exitOK || len(strings.Fields(stdout)) != 3 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, m := range s.pullAll(t) {
		if m.Attributes["source"] != "cli" || m.Attributes["n"] != "1" || m.OrderingKey != "key-1" {
			t.Errorf("message %+v", m)
		}
	}
}

// A missing topic, an unreachable endpoint and failed publishes exit 1
// with the reason.
func TestPublishErrors(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	code, _, stderr := cli(t, "x\n", append([]string{"publish", "projects/test-project/topics/no-such-topic"}, s.endpoint()...)...)
	if code != exitFailure || !strings.Contains(stderr, "topic projects/test-project/topics/no-such-topic not found") {
		t.Fatalf("missing topic: exit %d, stderr %q", code, stderr)
	}
	addr := closedAddr(t)
	code, _, stderr = cli(t, "x\n", "publish", s.topic, "--endpoint", addr, "--insecure", "--connect-timeout", "3s")
	if code != exitFailure || !strings.Contains(stderr, "cannot reach "+addr) {
		t.Fatalf("unreachable: exit %d, stderr %q", code, stderr)
	}
	// PERMISSION_DENIED is not retried: every line fails, each reported.
	s.srv.FailNext("Publish", 100, codes.PermissionDenied)
	code, stdout, stderr := cli(t, "x\ny\n", append([]string{"publish", s.topic}, s.endpoint()...)...)
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "line 1:") || !strings.Contains(stderr, "line 2:") ||
		!strings.Contains(stderr, "2 messages failed to publish") {
		t.Fatalf("failing publish: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
