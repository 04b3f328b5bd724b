package pubsubtest

import (
	"context"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// SubscriptionConfig configures CreateSubscription.
type SubscriptionConfig struct {
	Name  string // full name, or a short id expanded with the server's project
	Topic string // full name, or a short id
	// AckDeadline is the subscription's ack deadline (for Pull), in whole
	// seconds; 0 means 10 s.
	AckDeadline               time.Duration
	EnableMessageOrdering     bool
	EnableExactlyOnceDelivery bool
	// Filter is the subscription's filter on attributes ("" delivers
	// every message), in the service's language, at most 256 bytes:
	// attributes:KEY (has KEY), attributes.KEY = "v", attributes.KEY != "v"
	// (true without KEY), hasPrefix(attributes.KEY, "p"), NOT or -, AND, OR
	// (not mixed without parentheses), parentheses. A KEY of other
	// characters than letters, digits, '_' and '-' is a string literal.
	Filter string
	// DeadLetterTopic (full name or short id; "" for none) receives a
	// message after MaxDeliveryAttempts failed deliveries (0: 5).
	DeadLetterTopic     string
	MaxDeliveryAttempts int32
	// MinBackoff and MaxBackoff make a retry policy when either is set
	// (the other one then takes the service's default, 10 s or 600 s).
	MinBackoff, MaxBackoff time.Duration
	// RetainAckedMessages keeps acknowledged messages for Seek for
	// Retention (0: 7 days), which also bounds unacknowledged ones.
	RetainAckedMessages bool
	Retention           time.Duration
}

// subscriptionPB is the subscription cfg describes.
func (s *Server) subscriptionPB(cfg SubscriptionConfig) *pubsubpb.Subscription {
	pb := &pubsubpb.Subscription{
		Name:                      s.subName(cfg.Name),
		Topic:                     s.topicName(cfg.Topic),
		AckDeadlineSeconds:        int32((cfg.AckDeadline + time.Second - 1) / time.Second),
		EnableMessageOrdering:     cfg.EnableMessageOrdering,
		EnableExactlyOnceDelivery: cfg.EnableExactlyOnceDelivery,
		Filter:                    cfg.Filter,
		RetainAckedMessages:       cfg.RetainAckedMessages,
	}
	if cfg.DeadLetterTopic != "" {
		pb.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{DeadLetterTopic: s.topicName(cfg.DeadLetterTopic), MaxDeliveryAttempts: cfg.MaxDeliveryAttempts}
	}
	if cfg.MinBackoff != 0 || cfg.MaxBackoff != 0 {
		pb.RetryPolicy = &pubsubpb.RetryPolicy{}
		if cfg.MinBackoff != 0 {
			pb.RetryPolicy.MinimumBackoff = durationpb.New(cfg.MinBackoff)
		}
		if cfg.MaxBackoff != 0 {
			pb.RetryPolicy.MaximumBackoff = durationpb.New(cfg.MaxBackoff)
		}
	}
	if cfg.Retention != 0 {
		pb.MessageRetentionDuration = durationpb.New(cfg.Retention)
	}
	return pb
}

// Project is the project that short names are expanded with (see
// WithProject).
func (s *Server) Project() string { return s.cfg.project }

// topicName expands a short topic id to "projects/{project}/topics/{id}";
// a full name is returned unchanged.
func (s *Server) topicName(id string) string { return s.expand(id, "topics") }

// subName expands a short subscription id to
// "projects/{project}/subscriptions/{id}"; a full name is returned unchanged.
func (s *Server) subName(id string) string { return s.expand(id, "subscriptions") }

func (s *Server) expand(name, kind string) string {
	if strings.HasPrefix(name, "projects/") || name == "" {
		return name
	}
	return "projects/" + s.cfg.project + "/" + kind + "/" + name
}

// CreateTopic creates a topic directly, without gRPC (so without counters
// or injected faults), and returns its full name. name is a full name or a
// short id, which the server expands with its project (WithProject).
func (s *Server) CreateTopic(ctx context.Context, name string) (string, error) {
	t, err := s.rpc().CreateTopic(ctx, &pubsubpb.Topic{Name: s.topicName(name)})
	if err != nil {
		return "", err
	}
	return t.Name, nil
}

// CreateSubscription creates a subscription directly, without gRPC (so
// without counters or injected faults), and returns its full name. The
// same rules as the CreateSubscription RPC apply.
func (s *Server) CreateSubscription(ctx context.Context, cfg SubscriptionConfig) (string, error) {
	sub, err := s.rpc().CreateSubscription(ctx, s.subscriptionPB(cfg))
	if err != nil {
		return "", err
	}
	return sub.Name, nil
}

// Publish publishes to a topic (full name or short id) directly, without
// gRPC (so without counters or injected faults), and returns the message
// ids.
// The messages are copied (their data and attribute map are shared, so do
// not change them afterwards); the same rules as the Publish RPC apply.
func (s *Server) Publish(_ context.Context, topicName string, msgs ...*pubsubpb.PubsubMessage) ([]string, error) {
	if err := checkMessages(msgs); err != nil {
		return nil, err
	}
	own := make([]*pubsubpb.PubsubMessage, len(msgs))
	for i, m := range msgs {
		own[i] = &pubsubpb.PubsubMessage{Data: m.Data, Attributes: m.Attributes, OrderingKey: m.OrderingKey}
	}
	topicName = s.topicName(topicName)
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := lookup(s.topics, topicName)
	if err != nil {
		return nil, err
	}
	return s.publishLocked(t, own)
}

// rpc returns the server's RPC methods, to call them directly (no
// interceptors: no counters, no injected faults).
func (s *Server) rpc() *rpcServer { return &rpcServer{Server: s} }
