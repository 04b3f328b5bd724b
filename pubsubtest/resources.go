package pubsubtest

import (
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// The admin RPCs of topics, subscriptions and snapshots follow one path:
// check the name, find the resource under s.mu (NOT_FOUND if missing),
// then read or change it. kind and the functions below are that path, once,
// so that the three kinds cannot drift apart in their checks or errors.

// named is a resource's config message: Topic, Subscription or Snapshot.
type named interface {
	proto.Message
	GetName() string
}

// kind is one kind of named resource the server holds.
type kind[V any, P named] struct {
	noun string // in errors: "topic and update_mask are required"
	// limit is the kind's name in internal/limits, for checking names (and
	// the project of a List) by the service's rules. Empty for snapshots:
	// their RPCs here have never checked names, so a malformed one is
	// simply NOT_FOUND.
	limit string
	all   func(*Server) map[string]*V // guarded by s.mu
	pb    func(*V) P                  // the config, owned by the server
}

var (
	topicKind = kind[topic, *pubsubpb.Topic]{
		noun:  "topic",
		limit: limits.Topics,
		all:   func(s *Server) map[string]*topic { return s.topics },
		pb:    func(t *topic) *pubsubpb.Topic { return t.pb },
	}
	subKind = kind[subscription, *pubsubpb.Subscription]{
		noun:  "subscription",
		limit: limits.Subscriptions,
		all:   func(s *Server) map[string]*subscription { return s.subs },
		pb:    func(sub *subscription) *pubsubpb.Subscription { return sub.pb },
	}
)

// snapshotKind is the snapshots as of now: looking them up drops the
// expired ones first (see snapshotsLocked).
func snapshotKind(now time.Time) kind[snapshot, *pubsubpb.Snapshot] {
	return kind[snapshot, *pubsubpb.Snapshot]{
		noun: "snapshot",
		all:  func(s *Server) map[string]*snapshot { return s.snapshotsLocked(now) },
		pb:   func(sn *snapshot) *pubsubpb.Snapshot { return sn.pb },
	}
}

// clone returns a deep copy of m, so that callers never share the server's
// config messages.
func clone[P proto.Message](m P) P { return proto.Clone(m).(P) }

// lookup returns all[name], or the service's NOT_FOUND for name.
func lookup[V any](all map[string]*V, name string) (*V, error) {
	if v := all[name]; v != nil {
		return v, nil
	}
	return nil, notFound(name)
}

// with checks name by the kind's rules (INVALID_ARGUMENT) and, holding
// s.mu, finds the resource (NOT_FOUND) and returns f's answer for it.
func with[V any, P named, R any](s *Server, k kind[V, P], name string, f func(*V) (R, error)) (R, error) {
	var zero R
	if k.limit != "" {
		if err := checkName(k.limit, name); err != nil {
			return zero, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := lookup(k.all(s), name)
	if err != nil {
		return zero, err
	}
	return f(v)
}

// get is the Get RPC of a kind: a copy of the resource's config.
func get[V any, P named](s *Server, k kind[V, P], name string) (P, error) {
	return with(s, k, name, func(v *V) (P, error) { return clone(k.pb(v)), nil })
}

// listRequest is what the List RPCs of topics, subscriptions and snapshots
// ask for.
type listRequest interface {
	GetProject() string
	GetPageSize() int32
	GetPageToken() string
}

// list is the List RPC of a kind: one page of copies of the configs of the
// project's resources, by name, in the response resp makes of them.
func list[V any, P named, R any](s *Server, k kind[V, P], req listRequest, resp func(page []P, next string) R) (R, error) {
	if k.limit != "" {
		if err := checkProject(req.GetProject()); err != nil {
			var zero R
			return zero, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	page, next, err := listPage(k.all(s), req.GetProject(), req.GetPageSize(), req.GetPageToken(), k.pb)
	if err != nil {
		var zero R
		return zero, err
	}
	return resp(page, next), nil
}

// update is the Update RPC of a kind: the top-level fields of src named in
// paths (none of them immutable) are copied onto a copy of the resource's
// config, which set validates and installs under s.mu.
func update[V any, P named](s *Server, k kind[V, P], src P, paths []string, immutable []string, set func(v *V, next P) error) (P, error) {
	if !src.ProtoReflect().IsValid() || len(paths) == 0 { // a nil src is not valid
		var zero P
		return zero, invalidArg("%s and update_mask are required", k.noun)
	}
	return with(s, k, src.GetName(), func(v *V) (P, error) {
		next := clone(k.pb(v))
		if err := applyMask(next, src, paths, immutable...); err != nil {
			var zero P
			return zero, err
		}
		if err := set(v, next); err != nil {
			var zero P
			return zero, err
		}
		return clone(next), nil
	})
}

// unchecked is k without its name checks.
func (k kind[V, P]) unchecked() kind[V, P] {
	k.limit = ""
	return k
}
