package pubsubtest

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/stage"
)

// deletedTopic is what the real service reports as the topic of a
// subscription whose topic was deleted.
const deletedTopic = "_deleted-topic_"

type topic struct {
	pb   *pubsubpb.Topic
	subs map[string]*subscription
	feat topicFeatures // retention log, snapshots
}

// subscription is one subscription's state: the ready queue, the live ack
// ids, the ordering keys and the open streams.
type subscription struct {
	name     string
	pb       *pubsubpb.Subscription // config; replaced, never mutated, on update
	topic    *topic                 // nil once the topic is deleted
	props    *pubsubpb.StreamingPullResponse_SubscriptionProperties
	ready    stage.Ring[*entry]
	out      map[string]*entry              // live ack id → entry
	keys     map[string]*stage.Ring[*entry] // ordering key → messages waiting behind the one out
	streams  map[*stream]struct{}           // open streams
	pullWait chan struct{}                  // closed when messages become ready; nil without waiters
	stats    SubStats
	feat     subFeatures // filter, retention, backoff, held bytes
}

func (sub *subscription) ordered() bool     { return sub.pb.GetEnableMessageOrdering() }
func (sub *subscription) exactlyOnce() bool { return sub.pb.GetEnableExactlyOnceDelivery() }

func (sub *subscription) setConfig(pb *pubsubpb.Subscription) {
	sub.pb = pb
	sub.props = &pubsubpb.StreamingPullResponse_SubscriptionProperties{
		ExactlyOnceDeliveryEnabled: pb.GetEnableExactlyOnceDelivery(),
		MessageOrderingEnabled:     pb.GetEnableMessageOrdering(),
	}
}

// validName reports whether name is "projects/{project}/{kind}/{id}" by
// the service's rules (see checkName).
func validName(name, kind string) bool { return limits.CheckName(kind, name) == nil }

// notFound is the real service's NOT_FOUND for a missing resource.
func notFound(name string) error {
	return status.Errorf(codes.NotFound, "Resource not found (resource=%s).", name)
}

func invalidArg(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func (s *Server) checkAckDeadline(secs int32) error {
	if secs < s.cfg.minAckSeconds() || secs > 600 {
		return invalidArg("Invalid ack deadline given: %d seconds; it must be between %d and 600.", secs, s.cfg.minAckSeconds())
	}
	return nil
}

// CreateTopic implements pubsubpb.PublisherServer.
func (s *rpcServer) CreateTopic(_ context.Context, req *pubsubpb.Topic) (*pubsubpb.Topic, error) {
	if err := checkName(limits.Topics, req.GetName()); err != nil {
		return nil, err
	}
	pb := clone(req)
	if err := checkTopic(pb); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topics[req.Name] != nil {
		return nil, status.Errorf(codes.AlreadyExists, "Topic already exists")
	}
	t := &topic{pb: pb, subs: make(map[string]*subscription)}
	s.topics[req.Name] = t
	return clone(t.pb), nil
}

// GetTopic implements pubsubpb.PublisherServer.
func (s *rpcServer) GetTopic(_ context.Context, req *pubsubpb.GetTopicRequest) (*pubsubpb.Topic, error) {
	return get(s.Server, topicKind, req.GetTopic())
}

// UpdateTopic implements pubsubpb.PublisherServer: it copies the top-level
// fields named in update_mask.
func (s *rpcServer) UpdateTopic(_ context.Context, req *pubsubpb.UpdateTopicRequest) (*pubsubpb.Topic, error) {
	return update(s.Server, topicKind, req.GetTopic(), req.GetUpdateMask().GetPaths(), []string{"name"},
		func(t *topic, next *pubsubpb.Topic) error {
			if err := checkTopic(next); err != nil {
				return err
			}
			s.topicUpdatedLocked(t, next)
			return nil
		})
}

// applyMask copies the top-level fields in paths from src to dst.
func applyMask(dst, src proto.Message, paths []string, immutable ...string) error {
	d, sr := dst.ProtoReflect(), src.ProtoReflect()
	for _, p := range paths {
		for _, im := range immutable {
			if p == im {
				return invalidArg("field %q cannot be updated", p)
			}
		}
		fd := d.Descriptor().Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			return invalidArg("invalid update_mask path %q", p)
		}
		if sr.Has(fd) {
			d.Set(fd, sr.Get(fd))
		} else {
			d.Clear(fd)
		}
	}
	return nil
}

// page returns names[token:token+size] and the next token.
func page(names []string, size int32, token string) ([]string, string, error) {
	sort.Strings(names)
	start := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(names) {
			return nil, "", invalidArg("invalid page token %q", token)
		}
		start = n
	}
	end := len(names)
	if size > 0 && start+int(size) < end {
		end = start + int(size)
	}
	next := ""
	if end < len(names) {
		next = strconv.Itoa(end)
	}
	return names[start:end], next, nil
}

// listPage returns one page of copies of the resources of project in all
// (topics or subscriptions), by name.
func listPage[V any, P proto.Message](all map[string]V, project string, size int32, token string, pb func(V) P) ([]P, string, error) {
	var names []string
	for n := range all {
		if strings.HasPrefix(n, project+"/") {
			names = append(names, n)
		}
	}
	names, next, err := page(names, size, token)
	if err != nil {
		return nil, "", err
	}
	out := make([]P, 0, len(names))
	for _, n := range names {
		out = append(out, clone(pb(all[n])))
	}
	return out, next, nil
}

// ListTopics implements pubsubpb.PublisherServer.
func (s *rpcServer) ListTopics(_ context.Context, req *pubsubpb.ListTopicsRequest) (*pubsubpb.ListTopicsResponse, error) {
	return list(s.Server, topicKind, req, func(topics []*pubsubpb.Topic, next string) *pubsubpb.ListTopicsResponse {
		return &pubsubpb.ListTopicsResponse{Topics: topics, NextPageToken: next}
	})
}

// ListTopicSubscriptions implements pubsubpb.PublisherServer.
func (s *rpcServer) ListTopicSubscriptions(_ context.Context, req *pubsubpb.ListTopicSubscriptionsRequest) (*pubsubpb.ListTopicSubscriptionsResponse, error) {
	return with(s.Server, topicKind, req.GetTopic(), func(t *topic) (*pubsubpb.ListTopicSubscriptionsResponse, error) {
		var names []string
		for n := range t.subs {
			names = append(names, n)
		}
		names, next, err := page(names, req.GetPageSize(), req.GetPageToken())
		if err != nil {
			return nil, err
		}
		return &pubsubpb.ListTopicSubscriptionsResponse{Subscriptions: names, NextPageToken: next}, nil
	})
}

// ListTopicSnapshots implements pubsubpb.PublisherServer.
func (s *rpcServer) ListTopicSnapshots(_ context.Context, req *pubsubpb.ListTopicSnapshotsRequest) (*pubsubpb.ListTopicSnapshotsResponse, error) {
	return with(s.Server, topicKind, req.GetTopic(), func(t *topic) (*pubsubpb.ListTopicSnapshotsResponse, error) {
		names, next, err := s.topicSnapshotsLocked(t, req.GetPageSize(), req.GetPageToken())
		if err != nil {
			return nil, err
		}
		return &pubsubpb.ListTopicSnapshotsResponse{Snapshots: names, NextPageToken: next}, nil
	})
}

// DeleteTopic implements pubsubpb.PublisherServer. As in the real service,
// its subscriptions remain, with topic "_deleted-topic_".
func (s *rpcServer) DeleteTopic(_ context.Context, req *pubsubpb.DeleteTopicRequest) (*emptypb.Empty, error) {
	return with(s.Server, topicKind, req.GetTopic(), func(t *topic) (*emptypb.Empty, error) {
		delete(s.topics, req.Topic)
		s.topicDeletedLocked(t)
		for _, sub := range t.subs {
			cfg := clone(sub.pb)
			cfg.Topic = deletedTopic
			sub.setConfig(cfg)
			sub.topic = nil
		}
		return &emptypb.Empty{}, nil
	})
}

// DetachSubscription implements pubsubpb.PublisherServer: the subscription
// is marked detached, its open streams end with FAILED_PRECONDITION, its
// messages are dropped and it receives no further message.
func (s *rpcServer) DetachSubscription(_ context.Context, req *pubsubpb.DetachSubscriptionRequest) (*pubsubpb.DetachSubscriptionResponse, error) {
	return with(s.Server, subKind, req.GetSubscription(), func(sub *subscription) (*pubsubpb.DetachSubscriptionResponse, error) {
		cfg := clone(sub.pb)
		cfg.Detached = true
		sub.setConfig(cfg)
		s.subDetachedLocked(sub)
		if sub.topic != nil {
			delete(sub.topic.subs, sub.name)
			sub.topic = nil
		}
		for st := range sub.streams {
			s.finishLocked(st, status.Error(codes.FailedPrecondition, "Subscription is detached."))
		}
		return &pubsubpb.DetachSubscriptionResponse{}, nil
	})
}

// CreateSubscription implements pubsubpb.SubscriberServer. An ack deadline
// of 0 means 10 s; otherwise it must be within 10–600 s (see
// WithMinAckDeadline). The subscription receives messages published after
// it was created.
func (s *rpcServer) CreateSubscription(_ context.Context, req *pubsubpb.Subscription) (*pubsubpb.Subscription, error) {
	if err := checkName(limits.Subscriptions, req.GetName()); err != nil {
		return nil, err
	}
	if err := checkName(limits.Topics, req.GetTopic()); err != nil {
		return nil, err
	}
	cfg := clone(req)
	if cfg.AckDeadlineSeconds == 0 {
		cfg.AckDeadlineSeconds = 10
	}
	if err := s.checkAckDeadline(cfg.AckDeadlineSeconds); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := lookup(s.topics, cfg.Topic)
	if err != nil {
		return nil, err
	}
	if cfg.Detached {
		return nil, invalidArg("detached cannot be set on a new subscription; use DetachSubscription.")
	}
	f, err := s.checkSubscriptionLocked(cfg)
	if err != nil {
		return nil, err
	}
	if s.subs[cfg.Name] != nil {
		return nil, status.Errorf(codes.AlreadyExists, "Subscription already exists")
	}
	sub := &subscription{
		name:    cfg.Name,
		topic:   t,
		out:     make(map[string]*entry),
		keys:    make(map[string]*stage.Ring[*entry]),
		streams: make(map[*stream]struct{}),
		feat:    subFeatures{filter: f},
	}
	sub.setConfig(cfg)
	s.subs[cfg.Name] = sub
	t.subs[cfg.Name] = sub
	return clone(cfg), nil
}

// GetSubscription implements pubsubpb.SubscriberServer.
func (s *rpcServer) GetSubscription(_ context.Context, req *pubsubpb.GetSubscriptionRequest) (*pubsubpb.Subscription, error) {
	return get(s.Server, subKind, req.GetSubscription())
}

// UpdateSubscription implements pubsubpb.SubscriberServer: it copies the
// top-level fields named in update_mask. Name, topic and message ordering
// cannot change, as in the real service.
func (s *rpcServer) UpdateSubscription(_ context.Context, req *pubsubpb.UpdateSubscriptionRequest) (*pubsubpb.Subscription, error) {
	return update(s.Server, subKind, req.GetSubscription(), req.GetUpdateMask().GetPaths(),
		[]string{"name", "topic", "enable_message_ordering", "filter", "detached"},
		func(sub *subscription, next *pubsubpb.Subscription) error {
			if _, err := s.checkSubscriptionLocked(next); err != nil {
				return err
			}
			if next.AckDeadlineSeconds == 0 {
				next.AckDeadlineSeconds = 10
			}
			if err := s.checkAckDeadline(next.AckDeadlineSeconds); err != nil {
				return err
			}
			s.subUpdatedLocked(sub, next)
			sub.setConfig(next)
			return nil
		})
}

// ListSubscriptions implements pubsubpb.SubscriberServer.
func (s *rpcServer) ListSubscriptions(_ context.Context, req *pubsubpb.ListSubscriptionsRequest) (*pubsubpb.ListSubscriptionsResponse, error) {
	return list(s.Server, subKind, req, func(subs []*pubsubpb.Subscription, next string) *pubsubpb.ListSubscriptionsResponse {
		return &pubsubpb.ListSubscriptionsResponse{Subscriptions: subs, NextPageToken: next}
	})
}

// DeleteSubscription implements pubsubpb.SubscriberServer: its open streams
// end with NOT_FOUND and its messages are dropped.
func (s *rpcServer) DeleteSubscription(_ context.Context, req *pubsubpb.DeleteSubscriptionRequest) (*emptypb.Empty, error) {
	return with(s.Server, subKind, req.GetSubscription(), func(sub *subscription) (*emptypb.Empty, error) {
		s.deleteSubLocked(sub)
		return &emptypb.Empty{}, nil
	})
}

func (s *Server) deleteSubLocked(sub *subscription) {
	name := sub.name
	delete(s.subs, name)
	if sub.topic != nil {
		delete(sub.topic.subs, name)
	}
	for _, e := range sub.out {
		s.leases.remove(e)
		e.state = stateGone
	}
	s.subDeletedLocked(sub)
	sub.out = make(map[string]*entry)
	sub.ready = stage.Ring[*entry]{}
	sub.keys = make(map[string]*stage.Ring[*entry])
	for st := range sub.streams {
		s.finishLocked(st, status.Errorf(codes.NotFound, "Subscription does not exist (resource=%s).", name))
	}
	if sub.pullWait != nil {
		close(sub.pullWait)
		sub.pullWait = nil
	}
}

// ModifyPushConfig implements pubsubpb.SubscriberServer: pubsubtest has no
// push subscriptions, so only an empty push config (pull) is accepted.
func (s *rpcServer) ModifyPushConfig(_ context.Context, req *pubsubpb.ModifyPushConfigRequest) (*emptypb.Empty, error) {
	return with(s.Server, subKind, req.GetSubscription(), func(*subscription) (*emptypb.Empty, error) {
		if pc := req.GetPushConfig(); pc != nil && proto.Size(pc) > 0 {
			return nil, unsupported("push_config (push subscriptions)")
		}
		return &emptypb.Empty{}, nil
	})
}
