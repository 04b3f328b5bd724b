package pubsubtest

import (
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The service's ranges for the features pubsubtest implements.
const (
	minMaxDeliveryAttempts = 5   // dead_letter_policy.max_delivery_attempts, lowest
	maxMaxDeliveryAttempts = 100 // dead_letter_policy.max_delivery_attempts, highest
	// defaultMaxDeliveryAttempts is used when a dead-letter policy leaves
	// max_delivery_attempts at 0.
	defaultMaxDeliveryAttempts = 5

	maxBackoffLimit = 600 * time.Second // retry_policy backoffs are 0–600 s
	// defaultMinBackoff and defaultMaxBackoff apply when a retry policy
	// leaves a backoff unset.
	defaultMinBackoff = 10 * time.Second
	defaultMaxBackoff = 600 * time.Second

	minRetention        = 10 * time.Minute    // message_retention_duration of a subscription or topic, lowest
	maxSubRetention     = 7 * 24 * time.Hour  // subscription message_retention_duration, highest
	maxTopicRetention   = 31 * 24 * time.Hour // topic message_retention_duration, highest
	defaultSubRetention = 7 * 24 * time.Hour  // subscription message_retention_duration when unset

	// snapshotLifetimeLimit is how long a snapshot lasts from the
	// publication of its oldest message.
	snapshotLifetimeLimit = 7 * 24 * time.Hour
)

// unsupported is the error for a field pubsubtest does not implement: it is
// refused, never accepted and ignored.
func unsupported(field string) error {
	return status.Errorf(codes.Unimplemented, "pubsubtest does not support the field %s; clear it (the real service would act on it).", field)
}

// Subscription fields that pubsubtest implements, or that are output only
// (overwritten) or plain metadata (labels, tags). Any other field that is
// set is refused by name, so that a new field of the API is never silently
// ignored.
var subFieldsKnown = map[protoreflect.Name]bool{
	"name": true, "topic": true, "ack_deadline_seconds": true, "retain_acked_messages": true,
	"message_retention_duration": true, "labels": true, "tags": true, "enable_message_ordering": true,
	"expiration_policy": true, "filter": true, "dead_letter_policy": true, "retry_policy": true,
	"detached": true, "enable_exactly_once_delivery": true, "push_config": true,
	// Output only: set by the server.
	"topic_message_retention_duration": true, "state": true, "analytics_hub_subscription_info": true,
}

var topicFieldsKnown = map[protoreflect.Name]bool{
	"name": true, "labels": true, "tags": true, "message_retention_duration": true,
	// Where the service may store messages: no behaviour to emulate.
	"message_storage_policy": true,
	// Output only.
	"satisfies_pzs": true, "state": true,
}

// unknownField returns the name of the first set field of m outside known.
func unknownField(m proto.Message, known map[protoreflect.Name]bool) string {
	var bad string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !known[fd.Name()] {
			bad = string(fd.Name())
			return false
		}
		return true
	})
	return bad
}

func checkDuration(field string, d *durationpb.Duration, lo, hi time.Duration) (time.Duration, error) {
	if err := d.CheckValid(); err != nil {
		return 0, invalidArg("Invalid %s: %v.", field, err)
	}
	v := d.AsDuration()
	if v < lo || v > hi {
		return 0, invalidArg("Invalid %s: %v; it must be between %v and %v.", field, v, lo, hi)
	}
	return v, nil
}

// checkTopic validates a topic to create or the result of an update,
// and clears its output-only fields.
func checkTopic(t *pubsubpb.Topic) error {
	if f := unknownField(t, topicFieldsKnown); f != "" {
		return unsupported(f)
	}
	if t.MessageRetentionDuration != nil {
		if _, err := checkDuration("message_retention_duration", t.MessageRetentionDuration, minRetention, maxTopicRetention); err != nil {
			return err
		}
	}
	t.SatisfiesPzs = false
	t.State = pubsubpb.Topic_ACTIVE
	return nil
}

// checkSubscriptionLocked validates a subscription to create, or the result
// of an update, against the service's rules, fills in the defaults the
// service fills in, and returns its parsed filter. s.mu must be held (the
// dead-letter topic must exist).
func (s *Server) checkSubscriptionLocked(sub *pubsubpb.Subscription) (filter, error) {
	if f := unknownField(sub, subFieldsKnown); f != "" {
		return nil, unsupported(f)
	}
	if pc := sub.PushConfig; pc != nil && proto.Size(pc) > 0 {
		return nil, unsupported("push_config (push subscriptions)")
	}
	sub.PushConfig = nil
	if ep := sub.ExpirationPolicy; ep != nil && ep.Ttl != nil {
		// No ttl: the subscription never expires, which is what pubsubtest
		// does; a ttl would need expiry after inactivity.
		return nil, unsupported("expiration_policy.ttl")
	}
	if sub.MessageRetentionDuration == nil {
		sub.MessageRetentionDuration = durationpb.New(defaultSubRetention)
	} else if _, err := checkDuration("message_retention_duration", sub.MessageRetentionDuration, minRetention, maxSubRetention); err != nil {
		return nil, err
	}
	if err := s.checkDeadLetterLocked(sub.DeadLetterPolicy); err != nil {
		return nil, err
	}
	if err := checkRetryPolicy(sub.RetryPolicy); err != nil {
		return nil, err
	}
	f, err := parseFilter(sub.Filter)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	sub.State = pubsubpb.Subscription_ACTIVE
	sub.AnalyticsHubSubscriptionInfo = nil
	sub.TopicMessageRetentionDuration = nil
	if t := s.topics[sub.Topic]; t != nil {
		sub.TopicMessageRetentionDuration = t.pb.MessageRetentionDuration
	}
	return f, nil
}

// checkDeadLetterLocked validates a subscription's dead-letter policy
// (nil: none) and fills in the service's default attempts; its topic must
// exist. s.mu must be held.
func (s *Server) checkDeadLetterLocked(dlp *pubsubpb.DeadLetterPolicy) error {
	if dlp == nil {
		return nil
	}
	if dlp.MaxDeliveryAttempts == 0 {
		dlp.MaxDeliveryAttempts = defaultMaxDeliveryAttempts
	}
	if n := dlp.MaxDeliveryAttempts; n < minMaxDeliveryAttempts || n > maxMaxDeliveryAttempts {
		return invalidArg("Invalid dead_letter_policy.max_delivery_attempts: %d; it must be between %d and %d.", n, minMaxDeliveryAttempts, maxMaxDeliveryAttempts)
	}
	if dlp.DeadLetterTopic == "" {
		return invalidArg("Invalid dead_letter_policy: dead_letter_topic is required.")
	}
	if !validName(dlp.DeadLetterTopic, "topics") {
		return invalidArg("Invalid dead_letter_policy.dead_letter_topic: (name=%s)", dlp.DeadLetterTopic)
	}
	if s.topics[dlp.DeadLetterTopic] == nil {
		return status.Errorf(codes.NotFound, "Dead letter topic not found (resource=%s).", dlp.DeadLetterTopic)
	}
	return nil
}

// checkRetryPolicy validates a subscription's retry policy (nil: none)
// and fills in the service's default backoffs, so that a stored policy
// always has both bounds.
func checkRetryPolicy(rp *pubsubpb.RetryPolicy) error {
	if rp == nil {
		return nil
	}
	if rp.MinimumBackoff == nil {
		rp.MinimumBackoff = durationpb.New(defaultMinBackoff)
	}
	if rp.MaximumBackoff == nil {
		rp.MaximumBackoff = durationpb.New(defaultMaxBackoff)
	}
	lo, err := checkDuration("retry_policy.minimum_backoff", rp.MinimumBackoff, 0, maxBackoffLimit)
	if err != nil {
		return err
	}
	hi, err := checkDuration("retry_policy.maximum_backoff", rp.MaximumBackoff, 0, maxBackoffLimit)
	if err != nil {
		return err
	}
	if lo > hi {
		return invalidArg("Invalid retry_policy: minimum_backoff %v is greater than maximum_backoff %v.", lo, hi)
	}
	return nil
}
