package pubsubtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pubsubapi "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// admin is Google's subscription admin client with helpers for the seek
// and snapshot tests.
type admin struct {
	t   *testing.T
	srv *Server
	sub *pubsubapi.SubscriptionAdminClient
	top *pubsubapi.TopicAdminClient
}

func newAdmin(t *testing.T, srv *Server) *admin {
	c := newGoogleClient(t, srv)
	return &admin{t: t, srv: srv, sub: c.SubscriptionAdminClient, top: c.TopicAdminClient}
}

func (a *admin) topic(id string, retention time.Duration) {
	a.t.Helper()
	tp := &pubsubpb.Topic{Name: a.srv.topicName(id)}
	if retention > 0 {
		tp.MessageRetentionDuration = durationpb.New(retention)
	}
	if _, err := a.top.CreateTopic(context.Background(), tp); err != nil {
		a.t.Fatal(err)
	}
}

func (a *admin) subscription(id, topic string, retainAcked bool) {
	a.t.Helper()
	if _, err := a.sub.CreateSubscription(context.Background(), &pubsubpb.Subscription{
		Name: a.srv.subName(id), Topic: a.srv.topicName(topic), RetainAckedMessages: retainAcked,
	}); err != nil {
		a.t.Fatal(err)
	}
}

// publish publishes one message per datum, one request each (so that
// their publish times differ).
func (a *admin) publish(topic string, data ...string) {
	a.t.Helper()
	for _, d := range data {
		if _, err := a.top.Publish(context.Background(), &pubsubpb.PublishRequest{
			Topic: a.srv.topicName(topic), Messages: []*pubsubpb.PubsubMessage{{Data: []byte(d)}},
		}); err != nil {
			a.t.Fatal(err)
		}
	}
}

// pull returns what is ready on sub, sorted by data.
func (a *admin) pull(sub string) []*pubsubpb.ReceivedMessage {
	a.t.Helper()
	// The tests expect nothing ready after some seeks: the Pull must then
	// come back at once, empty, rather than wait for a message.
	//lint:ignore SA1019 the empty answer needs return_immediately, which pubsubtest still honours
	resp, err := a.sub.Pull(context.Background(), &pubsubpb.PullRequest{Subscription: a.srv.subName(sub), MaxMessages: 100, ReturnImmediately: true})
	if err != nil {
		a.t.Fatal(err)
	}
	ms := resp.ReceivedMessages
	slices.SortFunc(ms, func(x, y *pubsubpb.ReceivedMessage) int {
		return compareStrings(string(x.Message.Data), string(y.Message.Data))
	})
	return ms
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (a *admin) ack(sub string, ms []*pubsubpb.ReceivedMessage) {
	a.t.Helper()
	if len(ms) == 0 {
		return
	}
	if err := a.sub.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: a.srv.subName(sub), AckIds: ackIDs(ms)}); err != nil {
		a.t.Fatal(err)
	}
}

// pullAck pulls, acknowledges and returns the data pulled, sorted.
func (a *admin) pullAck(sub string) []string {
	a.t.Helper()
	ms := a.pull(sub)
	a.ack(sub, ms)
	return datas(ms)
}

func datas(ms []*pubsubpb.ReceivedMessage) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, string(m.Message.Data))
	}
	return out
}

func (a *admin) seekTime(sub string, at time.Time) error {
	_, err := a.sub.Seek(context.Background(), &pubsubpb.SeekRequest{
		Subscription: a.srv.subName(sub), Target: &pubsubpb.SeekRequest_Time{Time: timestamppb.New(at)},
	})
	return err
}

func (a *admin) seekSnapshot(sub, snap string) error {
	_, err := a.sub.Seek(context.Background(), &pubsubpb.SeekRequest{
		Subscription: a.srv.subName(sub), Target: &pubsubpb.SeekRequest_Snapshot{Snapshot: a.snapName(snap)},
	})
	return err
}

func (a *admin) snapName(id string) string { return "projects/" + a.srv.Project() + "/snapshots/" + id }

func (a *admin) expect(what string, got []string, want ...string) {
	a.t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		a.t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

func TestGoogleClientSeekToTime(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newAdmin(t, srv)
	a.topic("topic", 0)
	a.subscription("keep", "topic", true)
	a.subscription("plain", "topic", false)
	a.publish("topic", "a", "b", "c")
	kept := a.pull("keep")
	a.ack("keep", kept)
	a.expect("keep, first delivery", datas(kept), "a", "b", "c")
	a.expect("plain, first delivery", a.pullAck("plain"), "a", "b", "c")
	tb := kept[1].Message.PublishTime.AsTime()

	// Acknowledged messages published at or after the time are replayed
	// where they are retained.
	if err := a.seekTime("keep", tb); err != nil {
		t.Fatal(err)
	}
	a.expect("keep after seeking to b", a.pullAck("keep"), "b", "c")
	if err := a.seekTime("plain", tb); err != nil {
		t.Fatal(err)
	}
	a.expect("plain after seeking to b", a.pullAck("plain"))

	// Seeking back to the start replays all; outstanding messages are
	// delivered again after a seek, with new ack ids.
	if err := a.seekTime("keep", time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	out := a.pull("keep")
	a.expect("keep after seeking to the start", datas(out), "a", "b", "c")
	if err := a.seekTime("keep", time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	again := a.pull("keep")
	a.expect("keep, outstanding messages after a second seek", datas(again), "a", "b", "c")
	if again[0].AckId == out[0].AckId {
		t.Errorf("ack id %s survived the seek", out[0].AckId)
	}

	// Seeking to the future acknowledges everything held.
	a.publish("topic", "d")
	if err := a.seekTime("keep", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := a.seekTime("plain", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	a.expect("keep after seeking to the future", a.pullAck("keep"))
	a.expect("plain after seeking to the future", a.pullAck("plain"))
	for _, sub := range []string{"keep", "plain"} {
		if st := srv.SubscriptionStats(sub); st.Backlog != 0 || st.Outstanding != 0 {
			t.Errorf("%s: stats %+v", sub, st)
		}
	}
	// Retained messages stay held; the others are gone.
	if st := srv.SubscriptionStats("keep"); st.HeldBytes == 0 {
		t.Errorf("keep holds nothing: %+v", st)
	}
	if st := srv.SubscriptionStats("plain"); st.HeldBytes != 0 {
		t.Errorf("plain still holds %d bytes", st.HeldBytes)
	}

	// A topic that retains messages lets a new subscription seek to
	// messages published before it existed.
	a.topic("retained", time.Hour)
	a.publish("retained", "x", "y")
	a.subscription("late", "retained", false)
	a.expect("late before seeking", a.pullAck("late"))
	if err := a.seekTime("late", time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	a.expect("late after seeking to the start", a.pullAck("late"), "x", "y")
	got, err := a.sub.GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: srv.subName("late")})
	if err != nil || got.TopicMessageRetentionDuration.AsDuration() != time.Hour || got.MessageRetentionDuration.AsDuration() != defaultSubRetention {
		t.Errorf("GetSubscription = %v, %v", got, err)
	}

	// Errors, and an injected fault.
	ctx := context.Background()
	_, err = a.sub.Seek(ctx, &pubsubpb.SeekRequest{Subscription: srv.subName("keep")})
	wantCode(t, "Seek without target", err, codes.InvalidArgument, "target")
	wantCode(t, "Seek of a missing subscription", a.seekTime("missing", time.Now()), codes.NotFound, srv.subName("missing"))
	srv.FailNext("Seek", 1, codes.PermissionDenied)
	wantCode(t, "Seek with an injected fault", a.seekTime("keep", time.Now()), codes.PermissionDenied)
	if ms := srv.MethodStats("Seek"); ms.Injected != 1 {
		t.Errorf("Seek stats %+v", ms)
	}
}

func TestGoogleClientRetentionValidation(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newAdmin(t, srv)
	ctx := context.Background()
	for _, d := range []time.Duration{5 * time.Minute, 32 * 24 * time.Hour} {
		_, err := a.top.CreateTopic(ctx, &pubsubpb.Topic{Name: srv.topicName("topic"), MessageRetentionDuration: durationpb.New(d)})
		wantCode(t, "topic retention "+d.String(), err, codes.InvalidArgument, "message_retention_duration")
	}
	a.topic("topic", 0)
	for _, d := range []time.Duration{5 * time.Minute, 8 * 24 * time.Hour} {
		_, err := a.sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: srv.subName("sub"), Topic: srv.topicName("topic"), MessageRetentionDuration: durationpb.New(d)})
		wantCode(t, "subscription retention "+d.String(), err, codes.InvalidArgument, "message_retention_duration")
	}
}

// TestRetentionWindowVirtualTime: acknowledged messages are retained for
// the subscription's message_retention_duration from their publication,
// and no longer.
func TestRetentionWindowVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		a := newAdmin(t, srv)
		a.topic("topic", 0)
		if _, err := a.sub.CreateSubscription(context.Background(), &pubsubpb.Subscription{
			Name: srv.subName("sub"), Topic: srv.topicName("topic"), RetainAckedMessages: true,
			MessageRetentionDuration: durationpb.New(10 * time.Minute),
		}); err != nil {
			t.Fatal(err)
		}
		a.publish("topic", "old")
		time.Sleep(6 * time.Minute)
		a.publish("topic", "new")
		a.expect("first delivery", a.pullAck("sub"), "new", "old")
		time.Sleep(5 * time.Minute) // "old" is 11 minutes old, "new" 5
		if err := a.seekTime("sub", time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		a.expect("after seeking to the start", a.pullAck("sub"), "new")
		time.Sleep(6 * time.Minute)
		if err := a.seekTime("sub", time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		a.expect("after the window", a.pullAck("sub"))
		if st := srv.SubscriptionStats("sub"); st.HeldBytes != 0 {
			t.Errorf("still holds %d bytes", st.HeldBytes)
		}
		// An unacknowledged message is dropped past the window too.
		a.publish("topic", "stale")
		time.Sleep(10*time.Minute + time.Second)
		a.expect("unacknowledged past the window", a.pullAck("sub"))
		if st := srv.SubscriptionStats("sub"); st.Discarded != 1 || st.HeldBytes != 0 || st.Backlog != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestGoogleClientSeekReplaysToReceive: a subscriber receiving with
// Google's client gets the acknowledged messages again after a Seek to a
// time before them, and after a Seek to a snapshot taken before them.
func TestGoogleClientSeekReplaysToReceive(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := newGoogleClient(t, srv)
	a := &admin{t: t, srv: srv, sub: c.SubscriptionAdminClient, top: c.TopicAdminClient}
	a.topic("topic", 0)
	a.subscription("sub", "topic", true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: a.snapName("before"), Subscription: srv.subName("sub")}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- c.Subscriber("sub").Receive(ctx, func(_ context.Context, m *pubsub.Message) {
			mu.Lock()
			seen[string(m.Data)]++
			mu.Unlock()
			m.Ack()
		})
	}()
	a.publish("topic", "a", "b", "c")
	waitFor(t, "3 acks", func() bool { return srv.SubscriptionStats("sub").Acked == 3 })
	start := time.Unix(0, 0)
	if err := a.seekTime("sub", start); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "6 acks", func() bool { return srv.SubscriptionStats("sub").Acked == 6 })
	if err := a.seekSnapshot("sub", "before"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "9 acks", func() bool { return srv.SubscriptionStats("sub").Acked == 9 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Receive = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range []string{"a", "b", "c"} {
		if seen[d] != 3 {
			t.Errorf("%s received %d times, want 3 (first delivery, after each seek)", d, seen[d])
		}
	}
}
