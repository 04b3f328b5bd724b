package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// cliReader runs the CLI in-process on stdin and returns its exit code
// and output.
func cliReader(t testing.TB, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb syncBuffer
	code = run(ctx, args, stdin, &out, &errb)
	return code, out.String(), errb.String()
}

// pullEvery pulls every message the subscription holds, without acking,
// by id.
func pullEvery(t testing.TB, srv *pubsubtest.Server, sub string) map[string]*pubsubpb.PubsubMessage {
	t.Helper()
	client := pubsubpb.NewSubscriberClient(srv.ClientConn())
	all := map[string]*pubsubpb.PubsubMessage{}
	for {
		//lint:ignore SA1019 return_immediately ends the pull when the subscription is empty
		resp, err := client.Pull(context.Background(), &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000, ReturnImmediately: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ReceivedMessages) == 0 {
			return all
		}
		for _, rm := range resp.ReceivedMessages {
			all[rm.Message.MessageId] = rm.Message
		}
	}
}

// longTopicServer is a server whose topic has the longest name the service
// allows, with a subscription "sub-long" on it.
func longTopicServer(t testing.TB) (srv *pubsubtest.Server, topic, sub string) {
	t.Helper()
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	project := "p" + strings.Repeat("r", limits.MaxProjectIDLength-1)
	topic, err := s.srv.CreateTopic(context.Background(), "projects/"+project+"/topics/t"+strings.Repeat("x", limits.MaxResourceIDLength-1))
	if err != nil {
		t.Fatal(err)
	}
	if len(topic) != longestTopicName {
		t.Fatalf("topic name of %d bytes, want %d", len(topic), longestTopicName)
	}
	sub, err = s.srv.CreateSubscription(context.Background(), pubsubtest.SubscriptionConfig{Name: "sub-long", Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	return s.srv, topic, sub
}

// TestMaxLineBytesFillsTheRequest: the line limit is exact for the longest
// topic name: a request with a line of that many bytes fits the service's
// request limit, one byte more does not (proto.Size of the real request),
// whatever the attributes and ordering key.
func TestMaxLineBytesFillsTheRequest(t *testing.T) {
	many := map[string]string{}
	for i := range limits.MaxAttributes {
		many[strconv.Itoa(i)+strings.Repeat("k", limits.MaxAttributeKeyBytes-3)] = strings.Repeat("v", limits.MaxAttributeValueBytes)
	}
	cases := []struct {
		name  string
		attrs map[string]string
		key   string
	}{
		{"none", nil, ""},
		{"one short attribute", map[string]string{"source": "cli"}, ""},
		{"a 127-byte attribute entry", map[string]string{strings.Repeat("k", 60): strings.Repeat("v", 63)}, ""},
		{"the longest attribute", map[string]string{strings.Repeat("k", limits.MaxAttributeKeyBytes): strings.Repeat("v", limits.MaxAttributeValueBytes)}, ""},
		{"100 of the longest attributes", many, ""},
		{"short ordering key", nil, "k"},
		{"longest ordering key and attribute", map[string]string{"a": "b"}, strings.Repeat("o", limits.MaxOrderingKeyBytes)},
	}
	topic := strings.Repeat("t", longestTopicName)
	data := make([]byte, limits.MaxDataBytes+1)
	for _, c := range cases {
		n := maxLineBytes(c.attrs, c.key)
		size := func(d int) int {
			return proto.Size(&pubsubpb.PublishRequest{Topic: topic, Messages: []*pubsubpb.PubsubMessage{{Data: data[:d], Attributes: c.attrs, OrderingKey: c.key}}})
		}
		if s := size(n); s > limits.MaxRequestBytes {
			t.Errorf("%s: a line of %d bytes makes a request of %d bytes, over %d", c.name, n, s, limits.MaxRequestBytes)
		}
		if s := size(n + 1); s <= limits.MaxRequestBytes && n < limits.MaxDataBytes {
			t.Errorf("%s: limit %d, but a line of %d bytes still fits (%d bytes)", c.name, n, n+1, s)
		}
	}
	if n := maxLineBytes(nil, ""); n != 9_999_615 {
		t.Errorf("limit without attributes %d, want 9,999,615", n)
	}
}

var helpLimit = regexp.MustCompile(`A line may be up to ([0-9,]+) bytes`)

// TestPublishLineAtTheDocumentedLimit: the largest line publish --help
// states is published, to a topic of the longest name, in a request of
// exactly the service's limit (so the line whole: it is all the request
// carries but the topic); one byte more stops the command before it sends
// anything, naming the limit. (The byte-for-byte test pulls what was
// published: pulling 10 MB here too would double the test's memory.)
func TestPublishLineAtTheDocumentedLimit(t *testing.T) {
	_, help, _ := cli(t, "", "publish", "--help")
	m := helpLimit.FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("publish --help states no line limit:\n%s", help)
	}
	limit, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	if err != nil {
		t.Fatal(err)
	}
	srv, topic, sub := longTopicServer(t)
	line := bytes.Repeat([]byte("x"), limit+2)
	line[limit] = '\n'
	code, stdout, stderr := cliReader(t, bytes.NewReader(line[:limit+1]), "publish", topic, "--endpoint", srv.Addr(), "--insecure")
	if code != exitOK || len(strings.Fields(stdout)) != 1 {
		t.Fatalf("a line of %d bytes: exit %d, stdout %q, stderr %.300q", limit, code, stdout, stderr)
	}
	if got := srv.MethodStats("Publish").MaxRequestBytes; got != limits.MaxRequestBytes {
		t.Errorf("request of %d bytes, want exactly %d", got, limits.MaxRequestBytes)
	}
	line[limit], line[limit+1] = 'x', '\n'
	code, stdout, stderr = cliReader(t, bytes.NewReader(line), "publish", topic, "--endpoint", srv.Addr(), "--insecure")
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "line 1 is longer than "+m[1]+" bytes") {
		t.Fatalf("a line of %d bytes: exit %d, stdout %q, stderr %.300q; want exit 1 naming the limit", limit+1, code, stdout, stderr)
	}
	if n := srv.SubscriptionStats(sub).Published; n != 1 {
		t.Errorf("%d messages published, want only the first line", n)
	}
}

// TestPublishLimitWithAttributes: with --attr and --ordering-key the limit
// is what they leave of the request: a line of that size is published to
// the longest topic name; one byte more is refused by name before anything
// is sent.
func TestPublishLimitWithAttributes(t *testing.T) {
	attrs := map[string]string{"source": "cli", strings.Repeat("k", 200): strings.Repeat("v", 1000)}
	key := strings.Repeat("o", 300)
	limit := maxLineBytes(attrs, key)
	if limit >= maxLineBytes(nil, "") {
		t.Fatalf("limit %d with attributes, not below %d", limit, maxLineBytes(nil, ""))
	}
	srv, topic, sub := longTopicServer(t)
	args := []string{"publish", topic, "--endpoint", srv.Addr(), "--insecure", "--ordering-key", key}
	for k, v := range attrs {
		args = append(args, "--attr", k+"="+v)
	}
	line := bytes.Repeat([]byte("y"), limit+2)
	line[limit] = '\n'
	code, stdout, stderr := cliReader(t, bytes.NewReader(line[:limit+1]), args...)
	if code != exitOK || len(strings.Fields(stdout)) != 1 {
		t.Fatalf("a line of %d bytes: exit %d, stdout %q, stderr %.300q", limit, code, stdout, stderr)
	}
	if got := srv.MethodStats("Publish").MaxRequestBytes; got > limits.MaxRequestBytes || got < limits.MaxRequestBytes-1 {
		t.Errorf("request of %d bytes, want the limit %d filled", got, limits.MaxRequestBytes)
	}
	line[limit], line[limit+1] = 'y', '\n'
	code, stdout, stderr = cliReader(t, bytes.NewReader(line), args...)
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "line 1 is longer than "+grouped(limit)+" bytes") {
		t.Fatalf("a line of %d bytes: exit %d, stdout %q, stderr %.300q; want exit 1 naming the limit %s", limit+1, code, stdout, stderr, grouped(limit))
	}
	if n, calls := srv.SubscriptionStats(sub).Published, srv.MethodStats("Publish").Calls; n != 1 || calls != 1 {
		t.Errorf("%d messages published in %d calls, want only the first line's", n, calls)
	}
}

// TestPublishByteForByte: each line is published as its bytes, only the
// terminating "\n" removed: a "\r" before it, a lone "\r", other control
// bytes, invalid UTF-8 and a last line without "\n" are kept as they are.
func TestPublishByteForByte(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	want := []string{"a\r", "\r", "b\rc", "\x00\xff\t tab ", "last"}
	code, stdout, stderr := cli(t, "a\r\n\r\n\nb\rc\n\x00\xff\t tab \nlast", append([]string{"publish", s.topic}, s.endpoint()...)...)
	ids := strings.Fields(stdout)
	if code != exitOK || len(ids) != len(want) {
		t.Fatalf("exit %d, ids %q, stderr %q; want %d ids", code, ids, stderr, len(want))
	}
	got := pullEvery(t, s.srv, s.sub)
	for i, id := range ids {
		if m := got[id]; m == nil || string(m.Data) != want[i] {
			t.Errorf("line %d (id %s): the server holds %+v, want data %q", i+1, id, m, want[i])
		}
	}
}

// TestPublishInterruptedTellsTheTruth: cancelling publish (what SIGINT or
// SIGTERM does) while stdin still flows stops the reading but lets the
// lines already read finish: exit 130, every id printed is on the server,
// the server holds nothing without an id, and no line is reported as
// failed that the server has.
func TestPublishInterruptedTellsTheTruth(t *testing.T) {
	s := newTestServer(t, pubsubtest.SubscriptionConfig{})
	pr, pw := io.Pipe()
	go func() {
		for i := 1; ; i++ {
			if _, err := fmt.Fprintf(pw, "line-%d\n", i); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"publish", s.topic}, s.endpoint()...), pr, &out, &errb) }()
	deadline := time.Now().Add(time.Minute)
	for len(strings.Fields(out.String())) < 300 {
		if time.Now().After(deadline) {
			t.Fatalf("no 300 ids within a minute; stderr %q", errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	code := <-done
	pr.Close()
	ids := strings.Fields(out.String())
	got := pullEvery(t, s.srv, s.sub)
	if code != exitInterrupted {
		t.Errorf("exit %d, want %d", code, exitInterrupted)
	}
	for _, id := range ids {
		if got[id] == nil {
			t.Errorf("id %s printed, but the server does not hold it", id)
		}
	}
	if len(got) != len(ids) {
		t.Errorf("the server holds %d messages, %d ids were printed", len(got), len(ids))
	}
	for _, l := range strings.Split(errb.String(), "\n") {
		if strings.Contains(l, "context canceled") {
			t.Errorf("a line reported as failed by the interrupt itself: %q", l)
		}
	}
}
