package pubsubtest

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestGoogleClientSnapshots(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newAdmin(t, srv)
	ctx := context.Background()
	a.topic("topic", 0)
	a.topic("other", 0)
	a.subscription("sub", "topic", false)
	a.subscription("sub2", "topic", false)
	a.subscription("othersub", "other", false)

	a.publish("topic", "a", "b")
	ms := a.pull("sub")
	a.ack("sub", ms[:1]) // a acknowledged, b outstanding
	bTime := ms[1].Message.PublishTime.AsTime()

	// Create: the snapshot holds b, and lasts 7 days from b's publication.
	snap, err := a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{
		Name: a.snapName("snap"), Subscription: srv.subName("sub"), Labels: map[string]string{"k": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Topic != srv.topicName("topic") || !snap.ExpireTime.AsTime().Equal(bTime.Add(7*24*time.Hour)) || snap.Labels["k"] != "v" {
		t.Errorf("CreateSnapshot = %v (b published %v)", snap, bTime)
	}
	_, err = a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: a.snapName("snap"), Subscription: srv.subName("sub")})
	wantCode(t, "CreateSnapshot again", err, codes.AlreadyExists, a.snapName("snap"))
	_, err = a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: a.snapName("x"), Subscription: srv.subName("missing")})
	wantCode(t, "CreateSnapshot of a missing subscription", err, codes.NotFound, srv.subName("missing"))
	_, err = a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: "snapshots/x", Subscription: srv.subName("sub")})
	wantCode(t, "CreateSnapshot with a bad name", err, codes.InvalidArgument, "snapshots/x")

	// Messages published after the snapshot belong to it too.
	a.publish("topic", "c")
	a.expect("s before the seek", a.pullAck("sub"), "c")
	a.ack("sub", ms[1:])
	a.expect("s drained", a.pullAck("sub"))

	// Seek to the snapshot: b (unacknowledged then) and c (published
	// since) are unacknowledged again; a is not.
	if err := a.seekSnapshot("sub", "snap"); err != nil {
		t.Fatal(err)
	}
	a.expect("s after seeking to the snapshot", a.pullAck("sub"), "b", "c")
	// Another subscription of the same topic may seek to it as well.
	a.expect("s2 first delivery", a.pullAck("sub2"), "a", "b", "c")
	if err := a.seekSnapshot("sub2", "snap"); err != nil {
		t.Fatal(err)
	}
	a.expect("s2 after seeking to the snapshot", a.pullAck("sub2"), "b", "c")
	wantCode(t, "Seek to a snapshot of another topic", a.seekSnapshot("othersub", "snap"), codes.FailedPrecondition, srv.topicName("topic"))
	wantCode(t, "Seek to a missing snapshot", a.seekSnapshot("sub", "missing"), codes.NotFound, a.snapName("missing"))

	// Get, List, ListTopicSnapshots.
	if got, err := a.sub.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: a.snapName("snap")}); err != nil || got.Name != a.snapName("snap") {
		t.Errorf("GetSnapshot = %v, %v", got, err)
	}
	if _, err := a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: a.snapName("snap2"), Subscription: srv.subName("othersub")}); err != nil {
		t.Fatal(err)
	}
	var names []string
	it := a.sub.ListSnapshots(ctx, &pubsubpb.ListSnapshotsRequest{Project: "projects/" + srv.Project(), PageSize: 1})
	for {
		sn, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, sn.Name)
	}
	if want := []string{a.snapName("snap"), a.snapName("snap2")}; !slices.Equal(names, want) {
		t.Errorf("ListSnapshots = %v, want %v", names, want)
	}
	names = nil
	tit := a.top.ListTopicSnapshots(ctx, &pubsubpb.ListTopicSnapshotsRequest{Topic: srv.topicName("topic")})
	for {
		n, err := tit.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if want := []string{a.snapName("snap")}; !slices.Equal(names, want) {
		t.Errorf("ListTopicSnapshots = %v, want %v", names, want)
	}

	// Update: labels and expire_time may change, the topic may not.
	upd, err := a.sub.UpdateSnapshot(ctx, &pubsubpb.UpdateSnapshotRequest{
		Snapshot:   &pubsubpb.Snapshot{Name: a.snapName("snap"), Labels: map[string]string{"k": "w"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	if err != nil || upd.Labels["k"] != "w" || upd.Topic != srv.topicName("topic") {
		t.Errorf("UpdateSnapshot labels = %v, %v", upd, err)
	}
	_, err = a.sub.UpdateSnapshot(ctx, &pubsubpb.UpdateSnapshotRequest{
		Snapshot:   &pubsubpb.Snapshot{Name: a.snapName("snap"), Topic: srv.topicName("other")},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"topic"}},
	})
	wantCode(t, "UpdateSnapshot of the topic", err, codes.InvalidArgument, "topic")
	_, err = a.sub.UpdateSnapshot(ctx, &pubsubpb.UpdateSnapshotRequest{
		Snapshot:   &pubsubpb.Snapshot{Name: a.snapName("snap"), ExpireTime: timestamppb.New(time.Now().Add(-time.Hour))},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"expire_time"}},
	})
	wantCode(t, "UpdateSnapshot to a past expire_time", err, codes.InvalidArgument, "expire_time")
	_, err = a.sub.UpdateSnapshot(ctx, &pubsubpb.UpdateSnapshotRequest{
		Snapshot:   &pubsubpb.Snapshot{Name: a.snapName("missing"), Labels: map[string]string{"k": "w"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	wantCode(t, "UpdateSnapshot of a missing snapshot", err, codes.NotFound, a.snapName("missing"))

	// Delete: gone, and what it held is released.
	held := srv.SubscriptionStats("sub").HeldBytes
	for _, id := range []string{"snap", "snap2"} {
		if err := a.sub.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: a.snapName(id)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.sub.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: a.snapName("snap")})
	wantCode(t, "GetSnapshot after delete", err, codes.NotFound, a.snapName("snap"))
	err = a.sub.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: a.snapName("snap")})
	wantCode(t, "DeleteSnapshot again", err, codes.NotFound, a.snapName("snap"))
	srv.mu.Lock()
	total := srv.feat.heldBytes
	srv.mu.Unlock()
	if held != 0 || total != 0 {
		t.Errorf("after acking everything and deleting the snapshots: subscription holds %d bytes, server %d", held, total)
	}

	// Snapshot calls take injected faults like every call.
	srv.FailNext("CreateSnapshot", 1, codes.PermissionDenied)
	_, err = a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: a.snapName("f"), Subscription: srv.subName("sub")})
	wantCode(t, "CreateSnapshot with an injected fault", err, codes.PermissionDenied)
}

// TestSnapshotLifetimeVirtualTime: a snapshot lasts 7 days from its oldest
// message's publication, and cannot be taken when that leaves less than
// an hour.
func TestSnapshotLifetimeVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(WithBufconn())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		a := newAdmin(t, srv)
		ctx := context.Background()
		a.topic("topic", 0)
		a.subscription("sub", "topic", false)
		a.publish("topic", "old")
		time.Sleep(24 * time.Hour)
		snap, err := a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: a.snapName("snap"), Subscription: srv.subName("sub")})
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(snap.ExpireTime.AsTime()); left != 6*24*time.Hour {
			t.Errorf("snapshot of a day-old message expires in %v, want 6 days", left)
		}
		time.Sleep(6*24*time.Hour - 30*time.Minute)
		_, err = a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: a.snapName("late"), Subscription: srv.subName("sub")})
		wantCode(t, "CreateSnapshot expiring within the hour", err, codes.FailedPrecondition, "hour")
		time.Sleep(30 * time.Minute)
		_, err = a.sub.GetSnapshot(ctx, &pubsubpb.GetSnapshotRequest{Snapshot: a.snapName("snap")})
		wantCode(t, "GetSnapshot once expired", err, codes.NotFound, a.snapName("snap"))
	})
}
