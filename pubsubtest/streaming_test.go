package pubsubtest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

func TestStreamingPullInitialRequestValidation(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	cases := []struct {
		name string
		req  *pubsubpb.StreamingPullRequest
		code codes.Code
	}{
		{"empty subscription", &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10}, codes.InvalidArgument},
		{"unknown subscription", &pubsubpb.StreamingPullRequest{Subscription: "projects/test-project/subscriptions/nope", StreamAckDeadlineSeconds: 10}, codes.NotFound},
		{"no ack deadline", &pubsubpb.StreamingPullRequest{Subscription: f.subn}, codes.InvalidArgument},
		{"ack deadline 9s", &pubsubpb.StreamingPullRequest{Subscription: f.subn, StreamAckDeadlineSeconds: 9}, codes.InvalidArgument},
		{"ack deadline 601s", &pubsubpb.StreamingPullRequest{Subscription: f.subn, StreamAckDeadlineSeconds: 601}, codes.InvalidArgument},
		{"modack 601s", &pubsubpb.StreamingPullRequest{Subscription: f.subn, StreamAckDeadlineSeconds: 10,
			ModifyDeadlineAckIds: []string{"x"}, ModifyDeadlineSeconds: []int32{601}}, codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := f.openRaw(t, c.req)
			_, err := sp.Recv()
			if status.Code(err) != c.code {
				t.Fatalf("Recv = %v, want %v", err, c.code)
			}
		})
	}
	if got := f.srv.SubscriptionStats("sub").RejectedRequests; got != 4 {
		t.Errorf("RejectedRequests = %d, want 4", got)
	}
}

func TestMinAckDeadlineOption(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{AckDeadline: time.Second}, WithMinAckDeadline(time.Second))
	f.publish(t, 1, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 1})
	recvN(t, sp, 1)
	if _, err := NewServer(WithMinAckDeadline(-time.Second)); err == nil {
		t.Error("NewServer(WithMinAckDeadline(-1s)) succeeded")
	}
}

func TestLaterRequestWithInitialOnlyFieldAbortsStream(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{}, WithRecordStreamRequests())
	cases := map[string]*pubsubpb.StreamingPullRequest{
		"subscription":             {Subscription: f.subn},
		"client_id":                {ClientId: "c"},
		"max_outstanding_messages": {MaxOutstandingMessages: 5},
		"max_outstanding_bytes":    {MaxOutstandingBytes: 5},
		"protocol_version":         {ProtocolVersion: 1},
	}
	n := int64(0)
	for field, later := range cases {
		t.Run(field, func(t *testing.T) {
			sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10, ClientId: "c", ProtocolVersion: 1})
			if err := sp.Send(later); err != nil {
				t.Fatal(err)
			}
			_, err := sp.Recv()
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != msgInitialOnly {
				t.Fatalf("Recv = %v, want INVALID_ARGUMENT %q", err, msgInitialOnly)
			}
			n++
			infos := f.srv.Streams("sub")
			last := infos[len(infos)-1]
			if last.Open || last.Code != codes.InvalidArgument || last.Rejected != 1 || last.Requests != 2 {
				t.Errorf("stream info = %+v", last)
			}
			if reqs := last.RequestLog; len(reqs) != 2 || !proto.Equal(reqs[1], later) {
				t.Errorf("recorded requests = %v", reqs)
			}
		})
	}
	if got := f.srv.SubscriptionStats("sub").RejectedRequests; got != n {
		t.Errorf("RejectedRequests = %d, want %d", got, n)
	}
}

func TestLaterStreamAckDeadlineAllowed(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10, ProtocolVersion: 1})
	if err := sp.Send(&pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	resp, err := sp.Recv() // the update is also a heartbeat, answered under protocol 1
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ReceivedMessages) != 0 || resp.SubscriptionProperties == nil {
		t.Errorf("heartbeat answer = %v", resp)
	}
	f.publish(t, 1, "")
	recvN(t, sp, 1)
	info := f.srv.Streams("sub")[0]
	if !info.Open || info.AckDeadline != 30*time.Second || info.InitialAckDeadline != 10*time.Second {
		t.Errorf("stream info = %+v", info)
	}
	// A bad update is refused like a bad initial deadline.
	if err := sp.Send(&pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 700}); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Recv after deadline 700 = %v, want INVALID_ARGUMENT", err)
	}
}

func TestHeartbeats(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{EnableExactlyOnceDelivery: true})
	t.Run("protocol 1 answered", func(t *testing.T) {
		sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60, ProtocolVersion: 1, ClientId: "me"})
		for i := 0; i < 3; i++ {
			if err := sp.Send(&pubsubpb.StreamingPullRequest{}); err != nil {
				t.Fatal(err)
			}
			resp, err := sp.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.ReceivedMessages) != 0 || !resp.GetSubscriptionProperties().GetExactlyOnceDeliveryEnabled() {
				t.Fatalf("heartbeat answer = %v", resp)
			}
		}
		info := f.srv.Streams("sub")[0]
		if info.Heartbeats != 3 || info.HeartbeatReplies != 3 || info.ClientID != "me" || info.ProtocolVersion != 1 {
			t.Errorf("stream info = %+v", info)
		}
	})
	t.Run("protocol 0 not answered", func(t *testing.T) {
		sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60})
		if err := sp.Send(&pubsubpb.StreamingPullRequest{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "heartbeat received", func() bool {
			infos := f.srv.Streams("sub")
			return len(infos) == 2 && infos[1].Heartbeats == 1
		})
		f.publish(t, 1, "")
		resp, err := sp.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ReceivedMessages) != 1 {
			t.Fatalf("first response = %v, want the message (no heartbeat answer)", resp)
		}
	})
}

func TestFlowControlMessages(t *testing.T) {
	const limit, total = 10, 50
	f := newFixture(t, SubscriptionConfig{})
	f.publish(t, total, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60, MaxOutstandingMessages: limit})
	got := recvN(t, sp, limit)
	waitFor(t, "backlog at the limit", func() bool {
		st := f.srv.SubscriptionStats("sub")
		return st.Outstanding == limit && st.Backlog == total-limit
	})
	// Ack a few at a time; each ack frees exactly that many places.
	received, acked := limit, 0
	for received < total {
		batch := got[:3]
		got = got[3:]
		if err := sp.Send(&pubsubpb.StreamingPullRequest{AckIds: ackIDs(batch)}); err != nil {
			t.Fatal(err)
		}
		acked += len(batch)
		want := min(len(batch), total-received)
		more := recvN(t, sp, want)
		received += len(more)
		got = append(got, more...)
		if out := received - acked; out > limit {
			t.Fatalf("%d messages outstanding, limit %d", out, limit)
		}
	}
	if err := sp.Send(&pubsubpb.StreamingPullRequest{AckIds: ackIDs(got)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all acked", func() bool { return f.srv.SubscriptionStats("sub").Acked == total })
	st := f.srv.SubscriptionStats("sub")
	if st.MaxOutstanding != limit || st.Delivered != total || st.Backlog != 0 {
		t.Errorf("stats = %+v", st)
	}
	if info := f.srv.Streams("sub")[0]; info.MaxOutstanding != limit || info.MaxOutstandingMessages != limit {
		t.Errorf("stream info = %+v", info)
	}
}

func TestFlowControlBytes(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	f.publish(t, 10, "") // "m0".."m9": all the same size
	f.srv.mu.Lock()
	size := f.srv.subs[f.subn].ready.Front().msg.size
	f.srv.mu.Unlock()
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60, MaxOutstandingBytes: 3 * size})
	got := recvN(t, sp, 3)
	waitFor(t, "3 out", func() bool { return f.srv.Streams("sub")[0].OutstandingBytes == 3*size })
	if err := sp.Send(&pubsubpb.StreamingPullRequest{AckIds: ackIDs(got[:1])}); err != nil {
		t.Fatal(err)
	}
	recvN(t, sp, 1)
	if info := f.srv.Streams("sub")[0]; info.MaxOutstandingBytesSeen != 3*size || info.Delivered != 4 {
		t.Errorf("stream info = %+v", info)
	}
}

func TestMaxMessagesPerResponse(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{}, WithMaxMessagesPerResponse(7))
	f.publish(t, 20, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60})
	n := 0
	for n < 20 {
		resp, err := sp.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ReceivedMessages) > 7 {
			t.Fatalf("response with %d messages", len(resp.ReceivedMessages))
		}
		n += len(resp.ReceivedMessages)
	}
	if r := f.srv.Streams("sub")[0].Responses; r != 3 {
		t.Errorf("Responses = %d, want 3", r)
	}
}

func TestRedeliveryAfterExpiryTCP(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{}, WithMinAckDeadline(time.Second))
	ids := f.publish(t, 1, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 1})
	first := recvN(t, sp, 1)[0]
	second := recvN(t, sp, 1)[0] // after the 1 s deadline
	if first.AckId == second.AckId || first.DeliveryAttempt != 1 || second.DeliveryAttempt != 2 {
		t.Fatalf("deliveries %v then %v", first, second)
	}
	if second.Message.MessageId != ids[0] {
		t.Fatalf("redelivered %q, want %q", second.Message.MessageId, ids[0])
	}
	// The stale ack id is ignored; the new one acks.
	if err := sp.Send(&pubsubpb.StreamingPullRequest{AckIds: []string{first.AckId}}); err != nil {
		t.Fatal(err)
	}
	if err := sp.Send(&pubsubpb.StreamingPullRequest{AckIds: []string{second.AckId}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ack", func() bool { return f.srv.SubscriptionStats("sub").Acked == 1 })
	st := f.srv.SubscriptionStats("sub")
	if st.Expired != 1 || st.Redelivered != 1 || st.Delivered != 2 || st.Outstanding != 0 {
		t.Errorf("stats = %+v", st)
	}
	if ms := f.srv.MessageStats(ids[0]); ms.Deliveries != 2 || ms.Acks != 1 {
		t.Errorf("message stats = %+v", ms)
	}
}

func TestModackRules(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	ctx := context.Background()
	f.publish(t, 2, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60})
	got := recvN(t, sp, 2)
	for _, secs := range []int32{-1, 601} {
		_, err := f.sub.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: f.subn, AckIds: ackIDs(got), AckDeadlineSeconds: secs})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("modack %d s = %v, want INVALID_ARGUMENT", secs, err)
		}
	}
	// Modack 600 extends; modack 0 is a nack: immediate redelivery, new ack id.
	if _, err := f.sub.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: f.subn, AckIds: ackIDs(got[:1]), AckDeadlineSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sub.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: f.subn, AckIds: ackIDs(got[1:]), AckDeadlineSeconds: 0}); err != nil {
		t.Fatal(err)
	}
	again := recvN(t, sp, 1)[0]
	if again.Message.MessageId != got[1].Message.MessageId || again.AckId == got[1].AckId || again.DeliveryAttempt != 2 {
		t.Errorf("redelivery after nack = %v", again)
	}
	// Stale and unknown ack ids are ignored without exactly-once.
	if _, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: []string{got[1].AckId, "junk"}}); err != nil {
		t.Errorf("ack of stale ids = %v", err)
	}
	// A modack in a stream request with a bad deadline ends the stream.
	if err := sp.Send(&pubsubpb.StreamingPullRequest{ModifyDeadlineAckIds: []string{again.AckId}, ModifyDeadlineSeconds: []int32{601}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Recv after stream modack 601 = %v, want INVALID_ARGUMENT", err)
	}
	st := f.srv.SubscriptionStats("sub")
	if st.Nacked != 1 || st.ModAcks != 1 || st.Acked != 0 || st.RejectedRequests != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func TestAckRequestSizeLimit(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	ctx := context.Background()
	long := string(make([]byte, 200))
	var ids []string
	for proto.Size(&pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: ids}) <= limits.MaxAckRequestBytes {
		ids = append(ids, long)
	}
	for name, call := range map[string]func() error{
		"Acknowledge": func() error {
			_, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: ids})
			return err
		},
		"ModifyAckDeadline": func() error {
			_, err := f.sub.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: f.subn, AckIds: ids, AckDeadlineSeconds: 10})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s over 512 KiB = %v, want INVALID_ARGUMENT", name, err)
		}
	}
	// One ack id fewer fits.
	if _, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: ids[1:]}); err != nil {
		t.Errorf("Acknowledge under 512 KiB = %v", err)
	}
	if got := f.srv.SubscriptionStats("sub").RejectedRequests; got != 2 {
		t.Errorf("RejectedRequests = %d, want 2", got)
	}
	ms := f.srv.MethodStats("Acknowledge")
	if ms.Calls != 2 || ms.Errors != 1 || ms.MaxRequestBytes <= limits.MaxAckRequestBytes {
		t.Errorf("Acknowledge stats = %+v", ms)
	}
}

func TestOrdering(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{EnableMessageOrdering: true})
	ctx := context.Background()
	const perKey = 5
	want := map[string][]string{}
	for i := 0; i < perKey; i++ {
		for _, key := range []string{"a", "b"} {
			ids, err := f.srv.Publish(ctx, f.topic, &pubsubpb.PubsubMessage{Data: []byte(key), OrderingKey: key})
			if err != nil {
				t.Fatal(err)
			}
			want[key] = append(want[key], ids[0])
		}
	}
	f.publish(t, 3, "") // unkeyed messages are not held back
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60})
	first := recvN(t, sp, 5) // a1, b1 and the 3 unkeyed
	if !first[0].GetMessage().GetPublishTime().IsValid() {
		t.Error("no publish time")
	}
	seen := map[string][]string{}
	out := map[string]*pubsubpb.ReceivedMessage{}
	for _, m := range first {
		if k := m.Message.OrderingKey; k != "" {
			if out[k] != nil {
				t.Fatalf("two messages of key %q out at once", k)
			}
			out[k] = m
			seen[k] = append(seen[k], m.Message.MessageId)
		}
	}
	// Nack b's first message once: it comes back before b's second.
	nacked := false
	for len(seen["a"])+len(seen["b"]) < 2*perKey || len(out) > 0 {
		req := &pubsubpb.StreamingPullRequest{}
		for k, m := range out {
			if k == "b" && !nacked {
				nacked = true
				req.ModifyDeadlineAckIds = append(req.ModifyDeadlineAckIds, m.AckId)
				req.ModifyDeadlineSeconds = append(req.ModifyDeadlineSeconds, 0)
				seen[k] = seen[k][:len(seen[k])-1]
			} else {
				req.AckIds = append(req.AckIds, m.AckId)
			}
			delete(out, k)
		}
		if err := sp.Send(req); err != nil {
			t.Fatal(err)
		}
		if len(seen["a"])+len(seen["b"]) == 2*perKey {
			break
		}
		resp, err := sp.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resp.ReceivedMessages {
			k := m.Message.OrderingKey
			if out[k] != nil {
				t.Fatalf("two messages of key %q out at once", k)
			}
			out[k] = m
			seen[k] = append(seen[k], m.Message.MessageId)
		}
	}
	for _, k := range []string{"a", "b"} {
		if len(seen[k]) != perKey {
			t.Fatalf("key %s: got %v, want %v", k, seen[k], want[k])
		}
		for i := range want[k] {
			if seen[k][i] != want[k][i] {
				t.Fatalf("key %s: got %v, want %v", k, seen[k], want[k])
			}
		}
	}
	if info := f.srv.Streams("sub")[0]; info.MaxOutstanding > 5 {
		t.Errorf("max outstanding %d", info.MaxOutstanding)
	}
}

func TestPull(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{AckDeadline: 30 * time.Second})
	ctx := context.Background()
	// Clients still send return_immediately: with nothing ready, the
	// server answers at once, empty.
	//lint:ignore SA1019 this checks that the server still honours return_immediately
	resp, err := f.sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: f.subn, MaxMessages: 10, ReturnImmediately: true})
	if err != nil || len(resp.ReceivedMessages) != 0 {
		t.Fatalf("Pull on empty = %v, %v", resp, err)
	}
	done := make(chan *pubsubpb.PullResponse, 1)
	go func() {
		r, err := f.sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: f.subn, MaxMessages: 10})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	f.publish(t, 3, "")
	r := <-done
	if r == nil || len(r.ReceivedMessages) == 0 {
		t.Fatalf("waiting Pull = %v", r)
	}
	if _, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: ackIDs(r.ReceivedMessages)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sub.Pull(ctx, &pubsubpb.PullRequest{Subscription: f.subn}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Pull without max_messages = %v", err)
	}
	st := f.srv.SubscriptionStats("sub")
	if st.Acked != int64(len(r.ReceivedMessages)) || st.Backlog != 3-st.Acked {
		t.Errorf("stats = %+v", st)
	}
}

// Without return_immediately and with nothing ready, Pull waits the
// server's pull wait for a message, then answers, empty.
func TestPullWaitsThePullWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := bubbleFixture(t, SubscriptionConfig{}, WithPullWait(5*time.Second))
		start := time.Now()
		resp, err := f.sub.Pull(context.Background(), &pubsubpb.PullRequest{Subscription: f.subn, MaxMessages: 10})
		if err != nil || len(resp.ReceivedMessages) != 0 {
			t.Fatalf("Pull = %v, %v; want an empty answer", resp, err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("answered after %v, want the pull wait, 5s", d)
		}
	})
}

func TestHeartbeatDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := bubbleFixture(t, SubscriptionConfig{}, WithHeartbeatDelay(5*time.Second))
		sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 10, ProtocolVersion: 1})
		start := time.Now()
		for i := 0; i < 2; i++ { // two pings before the answer: one answer
			if err := sp.Send(&pubsubpb.StreamingPullRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := sp.Recv(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("answered after %v, want 5s", d)
		}
		synctest.Wait()
		if info := f.srv.Streams("")[0]; info.Heartbeats != 2 || info.HeartbeatReplies != 1 {
			t.Errorf("stream info = %+v", info)
		}
	})
}
