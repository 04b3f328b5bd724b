package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The admin commands' tables: one resource as "field  value" rows, a list
// as one row per resource. --json prints the API's own JSON instead.

// add and always are the rows of one resource's fields: add leaves out an
// empty value, always shows it as "-".
func (t *table) add(name, value string) {
	if value != "" {
		t.row(name, value)
	}
}

func (t *table) always(name, value string) { t.row(name, cmp.Or(value, "-")) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func protoDuration(d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	return fmtDuration(d.AsDuration())
}

func protoTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

func labels(l map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

func topicFields(f *table, t *pubsubpb.Topic) {
	f.always("name", t.GetName())
	f.always("message retention", protoDuration(t.GetMessageRetentionDuration()))
	f.add("labels", labels(t.GetLabels()))
	f.add("kms key", t.GetKmsKeyName())
	f.add("schema", t.GetSchemaSettings().GetSchema())
	if s := t.GetState(); s != pubsubpb.Topic_STATE_UNSPECIFIED {
		f.add("state", s.String())
	}
}

func topicRow(project string, t *pubsubpb.Topic) []any {
	return []any{shortName(t.GetName(), project), cmp.Or(protoDuration(t.GetMessageRetentionDuration()), "-"), cmp.Or(labels(t.GetLabels()), "-")}
}

// backoff describes a retry policy: the service redelivers at once
// without one.
func backoff(p *pubsubpb.RetryPolicy) string {
	if p == nil {
		return "none (redeliver at once)"
	}
	lo := cmp.Or(protoDuration(p.GetMinimumBackoff()), "10s (default)")
	hi := cmp.Or(protoDuration(p.GetMaximumBackoff()), "10m (default)")
	return lo + " – " + hi
}

func subscriptionFields(f *table, s *pubsubpb.Subscription) {
	f.always("name", s.GetName())
	f.always("topic", s.GetTopic())
	f.always("ack deadline", fmtDuration(time.Duration(s.GetAckDeadlineSeconds())*time.Second))
	f.always("message ordering", yesNo(s.GetEnableMessageOrdering()))
	f.always("exactly-once delivery", yesNo(s.GetEnableExactlyOnceDelivery()))
	f.always("dead-letter topic", s.GetDeadLetterPolicy().GetDeadLetterTopic())
	if dl := s.GetDeadLetterPolicy(); dl != nil {
		f.always("max delivery attempts", fmt.Sprint(cmp.Or(dl.GetMaxDeliveryAttempts(), defaultDeliveryAttempts)))
	}
	f.always("retry backoff", backoff(s.GetRetryPolicy()))
	f.always("filter", s.GetFilter())
	f.always("retain acked", yesNo(s.GetRetainAckedMessages()))
	f.always("message retention", protoDuration(s.GetMessageRetentionDuration()))
	if e := s.GetExpirationPolicy(); e != nil {
		f.always("expires when idle for", protoDuration(e.GetTtl()))
	}
	f.add("push endpoint", s.GetPushConfig().GetPushEndpoint())
	f.add("labels", labels(s.GetLabels()))
	if s.GetDetached() {
		f.add("detached", "yes")
	}
	if st := s.GetState(); st != pubsubpb.Subscription_STATE_UNSPECIFIED {
		f.add("state", st.String())
	}
}

// subscriptionFeatures is the list column of what a subscription has
// beyond the defaults.
func subscriptionFeatures(s *pubsubpb.Subscription, project string) string {
	var out []string
	if s.GetEnableMessageOrdering() {
		out = append(out, "ordering")
	}
	if s.GetEnableExactlyOnceDelivery() {
		out = append(out, "exactly-once")
	}
	if dl := s.GetDeadLetterPolicy(); dl != nil {
		out = append(out, fmt.Sprintf("dead-letter %s after %d", shortName(dl.GetDeadLetterTopic(), project), cmp.Or(dl.GetMaxDeliveryAttempts(), defaultDeliveryAttempts)))
	}
	if p := s.GetRetryPolicy(); p != nil {
		out = append(out, "backoff "+backoff(p))
	}
	if s.GetFilter() != "" {
		out = append(out, "filter "+s.GetFilter())
	}
	if s.GetRetainAckedMessages() {
		out = append(out, "retain-acked")
	}
	// The service reports its default, 7 days, on every subscription.
	if d := s.GetMessageRetentionDuration(); d != nil && d.AsDuration() != maxSubRetention {
		out = append(out, "retention "+protoDuration(d))
	}
	if s.GetDetached() {
		out = append(out, "detached")
	}
	return cmp.Or(strings.Join(out, ", "), "-")
}

func subscriptionRow(project string, s *pubsubpb.Subscription) []any {
	return []any{shortName(s.GetName(), project), shortName(s.GetTopic(), project),
		fmtDuration(time.Duration(s.GetAckDeadlineSeconds()) * time.Second), subscriptionFeatures(s, project)}
}

func snapshotFields(f *table, s *pubsubpb.Snapshot) {
	f.always("name", s.GetName())
	f.always("topic", s.GetTopic())
	f.always("expires", protoTime(s.GetExpireTime()))
	f.add("labels", labels(s.GetLabels()))
}

func snapshotRow(project string, s *pubsubpb.Snapshot) []any {
	return []any{shortName(s.GetName(), project), shortName(s.GetTopic(), project), cmp.Or(protoTime(s.GetExpireTime()), "-")}
}
