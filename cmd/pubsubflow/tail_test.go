package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func (s *testServer) publish(t testing.TB, msgs ...*pubsubpb.PubsubMessage) []string {
	t.Helper()
	ids, err := s.srv.Publish(context.Background(), s.topic, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func parseTail(t testing.TB, out string) []tailLine {
	t.Helper()
	var lines []tailLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var tl tailLine
		if err := json.Unmarshal([]byte(l), &tl); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, tl)
	}
	return lines
}

// tail --ack prints every field of each message as one JSON line and acks
// it; binary data comes as data_base64.
func TestTailAck(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	ids := s.publish(t,
		&pubsubpb.PubsubMessage{Data: []byte("hello"), Attributes: map[string]string{"k": "v"}},
		&pubsubpb.PubsubMessage{Data: []byte{0xff, 0x00, 0xfe}, OrderingKey: "key-1"},
		&pubsubpb.PubsubMessage{Data: []byte("third")},
	)
	code, stdout, stderr := cli(t, "", append([]string{"tail", s.sub, "--ack", "--max", "3"}, s.endpoint()...)...)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := parseTail(t, stdout)
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), stdout)
	}
	byID := map[string]tailLine{}
	for _, l := range lines {
		byID[l.ID] = l
		if _, err := time.Parse(time.RFC3339Nano, l.PublishTime); err != nil || l.DeliveryAttempt != 1 {
			t.Errorf("line %+v: publish time %v, delivery attempt %d", l, err, l.DeliveryAttempt)
		}
	}
	if l := byID[ids[0]]; l.Data == nil || *l.Data != "hello" || l.Attributes["k"] != "v" || l.DataBase64 != nil {
		t.Errorf("text message: %+v", l)
	}
	if l := byID[ids[1]]; l.DataBase64 == nil || *l.DataBase64 != base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0xfe}) || l.OrderingKey != "key-1" || l.Data != nil {
		t.Errorf("binary message: %+v", l)
	}
	waitFor(t, "3 acks", func() bool { return s.srv.SubscriptionStats(s.sub).Acked == 3 })
	if st := s.srv.SubscriptionStats(s.sub); st.Outstanding != 0 || st.Redelivered != 0 {
		t.Fatalf("server: %+v", st)
	}
}

// Without --ack tail holds what it printed and nacks it all when it stops,
// so the subscription keeps every message; --base64 forces base64.
func TestTailWithoutAckKeepsMessages(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	for range 5 {
		s.publish(t, &pubsubpb.PubsubMessage{Data: []byte("keep me")})
	}
	code, stdout, stderr := cli(t, "", append([]string{"tail", "--max", "2", "--base64", s.sub}, s.endpoint()...)...)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := parseTail(t, stdout)
	if len(lines) != 2 || lines[0].DataBase64 == nil || *lines[0].DataBase64 != base64.StdEncoding.EncodeToString([]byte("keep me")) {
		t.Fatalf("output:\n%s", stdout)
	}
	// The printed messages and the ones buffered behind them were nacked
	// by Close (TestShutdownNacksRestOfResponse checks that it nacks them all).
	if st := s.srv.SubscriptionStats(s.sub); st.Acked != 0 || st.Nacked < 2 || st.Backlog < 2 {
		t.Fatalf("after tail without --ack: %+v; want nothing acked, at least 2 nacked and back in the backlog", st)
	}
	// They are there for the next tail.
	code, stdout, _ = cli(t, "", append([]string{"tail", "--max", "2", "--ack", s.sub}, s.endpoint()...)...)
	if code != exitOK || len(parseTail(t, stdout)) != 2 {
		t.Fatalf("second tail: exit %d, output:\n%s", code, stdout)
	}
}

// TestShutdownNacksRestOfResponse: when a Subscriber shuts down, the
// messages of the last StreamingPull response that it had not yet handed
// to the handler are nacked, not left to the stream ack deadline. Here tail
// stops after 1 of 5 messages that came in one response.
func TestShutdownNacksRestOfResponse(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	for range 5 {
		s.publish(t, &pubsubpb.PubsubMessage{Data: []byte("x")})
	}
	if code, _, stderr := cli(t, "", append([]string{"tail", "--max", "1", s.sub}, s.endpoint()...)...); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if st := s.srv.SubscriptionStats(s.sub); st.Outstanding != 0 || st.Nacked != 5 {
		t.Fatalf("after shutdown: %+v; want all 5 nacked, none left outstanding", st)
	}
}

// --timeout ends a tail that has nothing more to print, with exit 0 and
// a note when --max was not reached; PUBSUB_EMULATOR_HOST and a short name
// with --project find the server.
func TestTailTimeoutAndEmulatorHost(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	s.publish(t, &pubsubpb.PubsubMessage{Data: []byte("only one")})
	t.Setenv("PUBSUB_EMULATOR_HOST", s.srv.Addr())
	start := time.Now()
	code, stdout, stderr := cli(t, "", "tail", "sub-a", "--project", "test-project", "--ack", "--max", "3", "--timeout", "1s")
	if code != exitOK || len(parseTail(t, stdout)) != 1 || !strings.Contains(stderr, "timeout after 1s with 1 of 3 messages") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("tail took %v with --timeout 1s", el)
	}
}

// A missing subscription and an unreachable endpoint are runtime failures
// (exit 1) with a clear message, reported at once.
func TestTailErrors(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	code, _, stderr := cli(t, "", append([]string{"tail", "projects/test-project/subscriptions/no-such-sub"}, s.endpoint()...)...)
	if code != exitFailure || !strings.Contains(stderr, "subscription projects/test-project/subscriptions/no-such-sub not found") {
		t.Fatalf("missing subscription: exit %d, stderr %q", code, stderr)
	}
	addr := closedAddr(t)
	code, _, stderr = cli(t, "", "tail", s.sub, "--endpoint", addr, "--insecure", "--connect-timeout", "3s")
	if code != exitFailure || !strings.Contains(stderr, "cannot reach "+addr) {
		t.Fatalf("unreachable: exit %d, stderr %q", code, stderr)
	}
}
