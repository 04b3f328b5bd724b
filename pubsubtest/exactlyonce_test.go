package pubsubtest

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ackFailures reads the per-ack-id reasons the way Google's Go client does
// (apierror.FromError, then Metadata of the ErrorInfo).
func ackFailures(t *testing.T, err error) map[string]string {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("error = %v, want INVALID_ARGUMENT", err)
	}
	ae, ok := apierror.FromError(err)
	if !ok {
		t.Fatalf("not an API error: %v", err)
	}
	if ae.Reason() != errorInfoReason || ae.Domain() != errorInfoDomain {
		t.Errorf("ErrorInfo reason %q domain %q", ae.Reason(), ae.Domain())
	}
	return ae.Metadata()
}

func TestExactlyOnceErrorDetails(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{EnableExactlyOnceDelivery: true}, WithMinAckDeadline(time.Second))
	ctx := context.Background()
	f.publish(t, 3, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60})
	resp, err := sp.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetSubscriptionProperties().GetExactlyOnceDeliveryEnabled() {
		t.Errorf("response properties = %v", resp.SubscriptionProperties)
	}
	got := resp.ReceivedMessages
	if len(got) != 3 {
		t.Fatalf("got %d messages", len(got))
	}
	ack := func(ids ...string) error {
		_, err := f.sub.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: ids})
		return err
	}
	if err := ack(got[0].AckId); err != nil {
		t.Fatal(err)
	}
	// A settled ack id fails; the valid one in the same request is applied.
	md := ackFailures(t, ack(got[0].AckId, got[1].AckId))
	if len(md) != 1 || md[got[0].AckId] != reasonInvalidAckID {
		t.Errorf("metadata = %v", md)
	}
	if st := f.srv.SubscriptionStats("sub"); st.Acked != 2 {
		t.Errorf("Acked = %d, want 2", st.Acked)
	}
	// Unknown ack ids fail in ModifyAckDeadline too.
	_, err = f.sub.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: f.subn, AckIds: []string{"junk"}, AckDeadlineSeconds: 30})
	if md := ackFailures(t, err); md["junk"] != reasonInvalidAckID {
		t.Errorf("metadata = %v", md)
	}
	// An injected transient failure is not applied; a retry succeeds.
	f.srv.FailNextAckIDs(1, reasonTransientUnordered)
	if md := ackFailures(t, ack(got[2].AckId)); md[got[2].AckId] != reasonTransientUnordered {
		t.Errorf("metadata = %v", md)
	}
	if err := ack(got[2].AckId); err != nil {
		t.Errorf("retry: %v", err)
	}

	// Acks on the stream are confirmed in the next response.
	f.publish(t, 1, "")
	m := recvN(t, sp, 1)[0]
	if err := sp.Send(&pubsubpb.StreamingPullRequest{AckIds: []string{m.AckId, "junk"}}); err != nil {
		t.Fatal(err)
	}
	resp, err = sp.Recv()
	if err != nil {
		t.Fatal(err)
	}
	c := resp.GetAcknowledgeConfirmation()
	if len(c.GetAckIds()) != 1 || c.AckIds[0] != m.AckId || len(c.InvalidAckIds) != 1 || c.InvalidAckIds[0] != "junk" {
		t.Errorf("confirmation = %v", c)
	}

	// An expired ack id fails with the permanent reason.
	if err := sp.CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "stream closed", func() bool { return !f.srv.Streams("sub")[0].Open })
	f.publish(t, 1, "")
	sp2 := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 1})
	old := recvN(t, sp2, 1)[0]
	recvN(t, sp2, 1) // redelivered after 1 s
	_, err = f.sub.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: f.subn, AckIds: []string{old.AckId}, AckDeadlineSeconds: 30})
	if md := ackFailures(t, err); md[old.AckId] != reasonInvalidAckID {
		t.Errorf("metadata = %v", md)
	}
}

func TestNotExactlyOnceIgnoresStaleAckIDs(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{})
	f.srv.FailNextAckIDs(5, reasonTransientUnordered) // applies to exactly-once subscriptions only
	_, err := f.sub.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: f.subn, AckIds: []string{"junk"}})
	if err != nil {
		t.Errorf("Acknowledge(junk) = %v", err)
	}
}

// TestStreamConfirmationsFileInjectedFailures checks where a stream's
// confirmations put ack ids that fail: a transient unordered failure is
// unordered for an ack but temporary for a modack (whose confirmation has
// no unordered list), another transient failure is temporary, and a
// permanent one is invalid.
func TestStreamConfirmationsFileInjectedFailures(t *testing.T) {
	f := newFixture(t, SubscriptionConfig{EnableExactlyOnceDelivery: true})
	f.publish(t, 2, "")
	sp := f.open(t, &pubsubpb.StreamingPullRequest{StreamAckDeadlineSeconds: 60})
	got := recvN(t, sp, 2)
	a, b := got[0].AckId, got[1].AckId
	confirm := func(reason string) (*pubsubpb.StreamingPullResponse_AcknowledgeConfirmation, *pubsubpb.StreamingPullResponse_ModifyAckDeadlineConfirmation) {
		t.Helper()
		if reason != "" {
			f.srv.FailNextAckIDs(2, reason) // the ack id, then the modack id
		}
		req := &pubsubpb.StreamingPullRequest{AckIds: []string{a}, ModifyDeadlineAckIds: []string{b}, ModifyDeadlineSeconds: []int32{30}}
		if err := sp.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := sp.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAcknowledgeConfirmation(), resp.GetModifyAckDeadlineConfirmation()
	}
	one := func(l []string, id string) bool { return len(l) == 1 && l[0] == id }

	ac, mc := confirm(reasonTransientUnordered)
	if !one(ac.GetUnorderedAckIds(), a) || len(ac.GetAckIds())+len(ac.GetTemporaryFailedAckIds())+len(ac.GetInvalidAckIds()) != 0 {
		t.Errorf("unordered: ack confirmation = %v, want %s unordered", ac, a)
	}
	if !one(mc.GetTemporaryFailedAckIds(), b) || len(mc.GetAckIds())+len(mc.GetInvalidAckIds()) != 0 {
		t.Errorf("unordered: modack confirmation = %v, want %s temporary", mc, b)
	}
	ac, mc = confirm("TRANSIENT_FAILURE_OTHER")
	if !one(ac.GetTemporaryFailedAckIds(), a) || !one(mc.GetTemporaryFailedAckIds(), b) {
		t.Errorf("transient: confirmations = %v, %v; want both temporary", ac, mc)
	}
	ac, mc = confirm(reasonInvalidAckID)
	if !one(ac.GetInvalidAckIds(), a) || !one(mc.GetInvalidAckIds(), b) {
		t.Errorf("permanent: confirmations = %v, %v; want both invalid", ac, mc)
	}
	// The failures were not applied: both ack ids are still live.
	ac, mc = confirm("")
	if !one(ac.GetAckIds(), a) || !one(mc.GetAckIds(), b) {
		t.Errorf("no fault: confirmations = %v, %v; want both confirmed", ac, mc)
	}
}
