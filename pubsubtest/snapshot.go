package pubsubtest

import (
	"context"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/pubsubflow/pubsubflow/stage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// snapshot is the acknowledgement state of a subscription at one moment:
// the messages unacknowledged then, and every message published to the
// topic since. Seeking a subscription of the same topic to it makes
// exactly those messages unacknowledged.
type snapshot struct {
	pb    *pubsubpb.Snapshot // name, topic, expire_time, labels
	topic *topic             // nil once the topic is deleted: nothing more is added
	msgs  []*message         // unacknowledged when taken, in publish order
	after []*message         // published to the topic since, in publish order
	bytes int64              // its share of serverFeatures.heldBytes
	seq   uint64             // the last message id when taken
}

// snapshotsLocked returns the snapshot map, dropping the expired ones.
func (s *Server) snapshotsLocked(now time.Time) map[string]*snapshot {
	if s.feat.snapshots == nil {
		s.feat.snapshots = make(map[string]*snapshot)
	}
	for name, sn := range s.feat.snapshots {
		if !now.Before(sn.pb.ExpireTime.AsTime()) {
			s.deleteSnapshotLocked(name)
		}
	}
	return s.feat.snapshots
}

func (s *Server) deleteSnapshotLocked(name string) bool {
	sn := s.feat.snapshots[name]
	if sn == nil {
		return false
	}
	delete(s.feat.snapshots, name)
	if sn.topic != nil {
		delete(sn.topic.feat.snaps, sn)
	}
	s.feat.heldBytes -= sn.bytes
	return true
}

// unackedLocked returns the messages of sub not acknowledged, in publish
// order.
func (s *Server) unackedLocked(sub *subscription) []*message {
	var out []*message
	for _, e := range s.entriesLocked(sub, false) {
		out = append(out, e.msg)
	}
	return out
}

// entriesLocked returns every entry of sub not acknowledged (ready, behind
// an ordering key, outstanding, waiting out a backoff), and with retained
// the retained acknowledged ones too, in publish order.
func (s *Server) entriesLocked(sub *subscription, retained bool) []*entry {
	var out []*entry
	addRing := func(r *stage.Ring[*entry]) {
		out = slices.AppendSeq(out, r.All())
	}
	addRing(&sub.ready)
	for _, q := range sub.keys {
		addRing(q)
	}
	for _, e := range sub.out {
		out = append(out, e)
	}
	if sub.feat.delayed > 0 {
		for _, e := range s.feat.delayed {
			if e.sub == sub {
				out = append(out, e)
			}
		}
	}
	if retained {
		addRing(&sub.feat.retained)
	}
	slices.SortFunc(out, func(a, b *entry) int { return compareSeq(a.msg, b.msg) })
	return out
}

func compareSeq(a, b *message) int {
	switch {
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// CreateSnapshot implements pubsubpb.SubscriberServer. As in the service, a
// snapshot lasts 7 days from the publication of the oldest message it holds
// (FAILED_PRECONDITION if that leaves less than an hour), and a missing
// name gets one made up.
func (s *rpcServer) CreateSnapshot(_ context.Context, req *pubsubpb.CreateSnapshotRequest) (*pubsubpb.Snapshot, error) {
	now := time.Now()
	// The name is not checked by the service's rules here: a malformed one
	// is simply NOT_FOUND, as it always has been in pubsubtest.
	return with(s.Server, subKind.unchecked(), req.GetSubscription(), func(sub *subscription) (*pubsubpb.Snapshot, error) {
		name := req.GetName()
		if name == "" {
			project, _ := splitName(sub.name)
			name = "projects/" + project + "/snapshots/snapshot-" + strconv.FormatUint(s.lastSeqLocked(), 10) + "-" + strconv.FormatInt(now.UnixNano(), 36)
		}
		if !validName(name, "snapshots") {
			return nil, invalidArg("Invalid [snapshots] name: (name=%s)", name)
		}
		snaps := s.snapshotsLocked(now)
		if snaps[name] != nil {
			return nil, status.Errorf(codes.AlreadyExists, "Snapshot already exists (resource=%s).", name)
		}
		t := sub.topic
		if t == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "The subscription's topic was deleted (resource=%s).", sub.name)
		}
		msgs := s.unackedLocked(sub)
		oldest := now
		var size int64
		for _, m := range msgs {
			size += m.held()
			if pt := m.publishTime(); pt.Before(oldest) {
				oldest = pt
			}
		}
		expire := oldest.Add(snapshotLifetimeLimit)
		if expire.Sub(now) < time.Hour {
			return nil, status.Errorf(codes.FailedPrecondition, "The snapshot would expire in less than an hour: its oldest message was published at %v.", oldest)
		}
		if limit := s.cfg.maxBacklogBytes; limit > 0 && s.feat.heldBytes+size > limit {
			return nil, status.Errorf(codes.ResourceExhausted, "pubsubtest: the backlog bound of %d bytes is reached (%d bytes held, the snapshot needs %d)", limit, s.feat.heldBytes, size)
		}
		sn := &snapshot{
			pb:    &pubsubpb.Snapshot{Name: name, Topic: t.pb.Name, ExpireTime: timestamppb.New(expire), Labels: req.GetLabels()},
			topic: t,
			msgs:  msgs,
			bytes: size,
			seq:   s.lastSeqLocked(),
		}
		s.feat.heldBytes += size
		snaps[name] = sn
		if t.feat.snaps == nil {
			t.feat.snaps = make(map[*snapshot]struct{})
		}
		t.feat.snaps[sn] = struct{}{}
		return clone(sn.pb), nil
	})
}

// GetSnapshot implements pubsubpb.SubscriberServer.
func (s *rpcServer) GetSnapshot(_ context.Context, req *pubsubpb.GetSnapshotRequest) (*pubsubpb.Snapshot, error) {
	return get(s.Server, snapshotKind(time.Now()), req.GetSnapshot())
}

// ListSnapshots implements pubsubpb.SubscriberServer.
func (s *rpcServer) ListSnapshots(_ context.Context, req *pubsubpb.ListSnapshotsRequest) (*pubsubpb.ListSnapshotsResponse, error) {
	return list(s.Server, snapshotKind(time.Now()), req, func(snaps []*pubsubpb.Snapshot, next string) *pubsubpb.ListSnapshotsResponse {
		return &pubsubpb.ListSnapshotsResponse{Snapshots: snaps, NextPageToken: next}
	})
}

// topicSnapshotsLocked returns one page of the names of t's snapshots.
func (s *Server) topicSnapshotsLocked(t *topic, size int32, token string) ([]string, string, error) {
	var names []string
	for name, sn := range s.snapshotsLocked(time.Now()) {
		if sn.topic == t {
			names = append(names, name)
		}
	}
	return page(names, size, token)
}

// UpdateSnapshot implements pubsubpb.SubscriberServer: labels and
// expire_time can change (expire_time only to a time in the future).
func (s *rpcServer) UpdateSnapshot(_ context.Context, req *pubsubpb.UpdateSnapshotRequest) (*pubsubpb.Snapshot, error) {
	now := time.Now()
	return update(s.Server, snapshotKind(now), req.GetSnapshot(), req.GetUpdateMask().GetPaths(), []string{"name", "topic"},
		func(sn *snapshot, next *pubsubpb.Snapshot) error {
			if next.ExpireTime == nil || !next.ExpireTime.AsTime().After(now) {
				return invalidArg("Invalid expire_time: it must be in the future.")
			}
			sn.pb = next
			return nil
		})
}

// DeleteSnapshot implements pubsubpb.SubscriberServer.
func (s *rpcServer) DeleteSnapshot(_ context.Context, req *pubsubpb.DeleteSnapshotRequest) (*emptypb.Empty, error) {
	return with(s.Server, snapshotKind(time.Now()), req.GetSnapshot(), func(*snapshot) (*emptypb.Empty, error) {
		s.deleteSnapshotLocked(req.GetSnapshot())
		return &emptypb.Empty{}, nil
	})
}
