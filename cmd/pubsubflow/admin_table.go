package main

import (
	"fmt"
	"io"
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

// fields collects the rows of one resource; rows with an empty value are
// left out unless always.
type fields struct{ t table }

func (f *fields) add(name, value string) {
	if value != "" {
		f.t.row(name, value)
	}
}

func (f *fields) always(name, value string) {
	if value == "" {
		value = "-"
	}
	f.t.row(name, value)
}

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

func (a *adminClient) printTopic(t *pubsubpb.Topic) error {
	if a.json {
		return a.printJSON(t)
	}
	var f fields
	f.always("name", t.GetName())
	f.always("message retention", protoDuration(t.GetMessageRetentionDuration()))
	f.add("labels", labels(t.GetLabels()))
	f.add("kms key", t.GetKmsKeyName())
	f.add("schema", t.GetSchemaSettings().GetSchema())
	if s := t.GetState(); s != pubsubpb.Topic_STATE_UNSPECIFIED {
		f.add("state", s.String())
	}
	return f.t.write(a.out)
}

func writeTopicTable(w io.Writer, project string, topics []*pubsubpb.Topic) error {
	if len(topics) == 0 {
		_, err := fmt.Fprintf(w, "no topics in %s\n", project)
		return err
	}
	var t table
	t.row("TOPIC", "RETENTION", "LABELS")
	for _, tp := range topics {
		t.row(shortName(tp.GetName(), project), dash(protoDuration(tp.GetMessageRetentionDuration())), dash(labels(tp.GetLabels())))
	}
	return t.write(w)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// backoff describes a retry policy: the service redelivers at once
// without one.
func backoff(p *pubsubpb.RetryPolicy) string {
	if p == nil {
		return "none (redeliver at once)"
	}
	lo, hi := p.GetMinimumBackoff(), p.GetMaximumBackoff()
	loS, hiS := protoDuration(lo), protoDuration(hi)
	if lo == nil {
		loS = "10s (default)"
	}
	if hi == nil {
		hiS = "10m (default)"
	}
	return loS + " – " + hiS
}

func (a *adminClient) printSubscription(s *pubsubpb.Subscription) error {
	if a.json {
		return a.printJSON(s)
	}
	var f fields
	f.always("name", s.GetName())
	f.always("topic", s.GetTopic())
	f.always("ack deadline", fmtDuration(time.Duration(s.GetAckDeadlineSeconds())*time.Second))
	f.always("message ordering", yesNo(s.GetEnableMessageOrdering()))
	f.always("exactly-once delivery", yesNo(s.GetEnableExactlyOnceDelivery()))
	if dl := s.GetDeadLetterPolicy(); dl != nil {
		f.always("dead-letter topic", dl.GetDeadLetterTopic())
		n := dl.GetMaxDeliveryAttempts()
		if n == 0 {
			n = defaultDeliveryAttempts
		}
		f.always("max delivery attempts", fmt.Sprint(n))
	} else {
		f.always("dead-letter topic", "")
	}
	f.always("retry backoff", backoff(s.GetRetryPolicy()))
	f.always("filter", s.GetFilter())
	f.always("retain acked", yesNo(s.GetRetainAckedMessages()))
	f.always("message retention", protoDuration(s.GetMessageRetentionDuration()))
	if e := s.GetExpirationPolicy(); e != nil {
		f.always("expires when idle for", dash(protoDuration(e.GetTtl())))
	}
	f.add("push endpoint", s.GetPushConfig().GetPushEndpoint())
	f.add("labels", labels(s.GetLabels()))
	if s.GetDetached() {
		f.add("detached", "yes")
	}
	if st := s.GetState(); st != pubsubpb.Subscription_STATE_UNSPECIFIED {
		f.add("state", st.String())
	}
	return f.t.write(a.out)
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
		n := dl.GetMaxDeliveryAttempts()
		if n == 0 {
			n = defaultDeliveryAttempts
		}
		out = append(out, fmt.Sprintf("dead-letter %s after %d", shortName(dl.GetDeadLetterTopic(), project), n))
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
	return dash(strings.Join(out, ", "))
}

func writeSubscriptionTable(w io.Writer, project string, subs []*pubsubpb.Subscription) error {
	if len(subs) == 0 {
		_, err := fmt.Fprintf(w, "no subscriptions in %s\n", project)
		return err
	}
	var t table
	t.row("SUBSCRIPTION", "TOPIC", "ACK DEADLINE", "SETTINGS")
	for _, s := range subs {
		t.row(shortName(s.GetName(), project), shortName(s.GetTopic(), project),
			fmtDuration(time.Duration(s.GetAckDeadlineSeconds())*time.Second), subscriptionFeatures(s, project))
	}
	return t.write(w)
}

func (a *adminClient) printSnapshot(s *pubsubpb.Snapshot) error {
	if a.json {
		return a.printJSON(s)
	}
	var f fields
	f.always("name", s.GetName())
	f.always("topic", s.GetTopic())
	f.always("expires", protoTime(s.GetExpireTime()))
	f.add("labels", labels(s.GetLabels()))
	return f.t.write(a.out)
}

func writeSnapshotTable(w io.Writer, project string, snaps []*pubsubpb.Snapshot) error {
	if len(snaps) == 0 {
		_, err := fmt.Fprintf(w, "no snapshots in %s\n", project)
		return err
	}
	var t table
	t.row("SNAPSHOT", "TOPIC", "EXPIRES")
	for _, s := range snaps {
		t.row(shortName(s.GetName(), project), shortName(s.GetTopic(), project), dash(protoTime(s.GetExpireTime())))
	}
	return t.write(w)
}

// printDeleted confirms a deletion.
func (a *adminClient) printDeleted(kind, name string) error {
	if a.json {
		return a.printJSONValue(map[string]string{"deleted": name})
	}
	_, err := fmt.Fprintf(a.out, "deleted %s %s\n", kind, name)
	return err
}
