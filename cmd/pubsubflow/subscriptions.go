package main

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The service's retry policy defaults, used when only one backoff is
// given.
const (
	defaultMinBackoff = 10 * time.Second
	defaultMaxBackoff = 600 * time.Second
)

func subscriptionsCommand() *cobra.Command {
	o := new(adminOptions)
	return adminGroup(o, "subscriptions COMMAND [flags] [SUBSCRIPTION]", "create, get, list, delete or seek subscriptions", `
Manages subscriptions over the Pub/Sub API, on pubsubflow emulator, Google's
emulator or Pub/Sub itself.`,
		subscriptionsCreateCommand(o),
		getCommand(o, subscriptionResource, "print a subscription", "Prints SUBSCRIPTION's settings."),
		listCommand(o, subscriptionResource, "list a project's subscriptions", `
Lists the subscriptions of the project (--project, else the first set of
$PUBSUB_PROJECT_ID, $GOOGLE_CLOUD_PROJECT and $CLOUDSDK_CORE_PROJECT) with
their topic, ack deadline and the settings beyond the defaults.`),
		deleteCommand(o, subscriptionResource, "delete a subscription",
			"Deletes SUBSCRIPTION and the messages it kept; its open streams end."),
		subscriptionsSeekCommand(o))
}

// subscriptionFlags are the settings of subscriptions create.
type subscriptionFlags struct {
	topic       string
	ackDeadline durationValue
	ordering    bool
	exactlyOnce bool
	deadLetter  string
	maxAttempts int
	minBackoff  durationValue
	maxBackoff  durationValue
	filter      string
	retainAcked bool
	retention   durationValue
}

func (s *subscriptionFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.topic, "topic", "", "the `topic` to subscribe to (required)")
	fs.Var(&s.ackDeadline, "ack-deadline", "how long a delivered message waits for its ack before it is redelivered: a `duration` of 10s–600s in whole seconds (pubsubflow emulator --min-ack-deadline can allow less; default: the service's, 10s)")
	fs.BoolVar(&s.ordering, "ordering", false, "deliver messages with the same ordering key in publish order, one at a time")
	fs.BoolVar(&s.exactlyOnce, "exactly-once", false, "exactly-once delivery: an acked message is not redelivered, and acks are confirmed")
	fs.StringVar(&s.deadLetter, "dead-letter-topic", "", "the `topic` to publish a message to after --max-delivery-attempts failed deliveries (nacks or expired deadlines), and ack it; on Pub/Sub, the project's Pub/Sub service account must be allowed to publish to it and to ack on this subscription")
	fs.IntVar(&s.maxAttempts, "max-delivery-attempts", defaultDeliveryAttempts, "the `number` of deliveries of a message before it goes to the dead-letter topic, 5–100 (needs --dead-letter-topic)")
	fs.Var(&s.minBackoff, "min-backoff", "after a nack or an expired deadline, wait at least this `duration` before redelivering, 0s–600s; the wait doubles per attempt up to --max-backoff (default: redeliver at once; with only --max-backoff, 10s)")
	fs.Var(&s.maxBackoff, "max-backoff", "the longest wait before a redelivery, a `duration` of 0s–600s (default with --min-backoff: 10m)")
	fs.StringVar(&s.filter, "filter", "", `deliver only messages whose attributes match, e.g. 'attributes.kind = "order" AND NOT attributes:test' (at most 256 bytes; fixed once created). Messages that do not match are acked without delivery`)
	fs.BoolVar(&s.retainAcked, "retain-acked", false, "keep acked messages for --retention, so that seek to an earlier time replays them")
	fs.Var(&s.retention, "retention", "how long unacked (and with --retain-acked, acked) messages are kept, a `duration` of 10m–7d (default: the service's, 7d)")
}

// build checks the flags (fs, where they were given) and returns the
// subscription to create. Each group of flags is checked by a method of
// its own, in the order the errors are reported.
func (s *subscriptionFlags) build(o *adminOptions, name string, fs *pflag.FlagSet) (*pubsubpb.Subscription, error) {
	if s.topic == "" {
		return nil, usagef("missing --topic: the topic to subscribe to")
	}
	topic, err := o.ep.resolve("topics", s.topic)
	if err != nil {
		return nil, err
	}
	sub := &pubsubpb.Subscription{
		Name:                      name,
		Topic:                     topic,
		EnableMessageOrdering:     s.ordering,
		EnableExactlyOnceDelivery: s.exactlyOnce,
		Filter:                    s.filter,
		RetainAckedMessages:       s.retainAcked,
	}
	if sub.AckDeadlineSeconds, err = s.ackDeadlineSeconds(); err != nil {
		return nil, err
	}
	if sub.DeadLetterPolicy, err = s.deadLetterPolicy(o, fs); err != nil {
		return nil, err
	}
	if sub.RetryPolicy, err = s.retryPolicy(); err != nil {
		return nil, err
	}
	if err := s.checkFilter(); err != nil {
		return nil, err
	}
	if s.retention.set {
		if err := checkRange("retention", s.retention.d, minRetention, maxSubRetention); err != nil {
			return nil, err
		}
		sub.MessageRetentionDuration = durationpb.New(s.retention.d)
	}
	return sub, nil
}

// ackDeadlineSeconds is --ack-deadline in whole seconds, 0 (the
// service's default) when not given.
func (s *subscriptionFlags) ackDeadlineSeconds() (int32, error) {
	if !s.ackDeadline.set {
		return 0, nil
	}
	d := s.ackDeadline.d
	if err := checkRange("ack-deadline", d, minAckDeadline, maxAckDeadline); err != nil {
		return 0, err
	}
	if d%time.Second != 0 {
		return 0, usagef("--ack-deadline %v: want whole seconds", d)
	}
	return int32(d / time.Second), nil
}

// deadLetterPolicy is --dead-letter-topic with --max-delivery-attempts,
// nil without a dead-letter topic; the attempts given alone are an error,
// as they would be ignored.
func (s *subscriptionFlags) deadLetterPolicy(o *adminOptions, fs *pflag.FlagSet) (*pubsubpb.DeadLetterPolicy, error) {
	if s.deadLetter == "" {
		if fs.Changed("max-delivery-attempts") {
			return nil, usagef("--max-delivery-attempts needs --dead-letter-topic")
		}
		return nil, nil
	}
	dl, err := o.ep.resolve("topics", s.deadLetter)
	if err != nil {
		return nil, err
	}
	n := s.maxAttempts
	if n < minDeliveryAttempts || n > maxDeliveryAttempts {
		return nil, usagef("--max-delivery-attempts %d: want %d–%d", n, minDeliveryAttempts, maxDeliveryAttempts)
	}
	return &pubsubpb.DeadLetterPolicy{DeadLetterTopic: dl, MaxDeliveryAttempts: int32(n)}, nil
}

// retryPolicy is --min-backoff and --max-backoff, nil when neither is
// given; the one not given takes the service's default.
func (s *subscriptionFlags) retryPolicy() (*pubsubpb.RetryPolicy, error) {
	if !s.minBackoff.set && !s.maxBackoff.set {
		return nil, nil
	}
	lo, hi := defaultMinBackoff, defaultMaxBackoff
	if s.minBackoff.set {
		lo = s.minBackoff.d
		if err := checkRange("min-backoff", lo, 0, maxBackoff); err != nil {
			return nil, err
		}
	}
	if s.maxBackoff.set {
		hi = s.maxBackoff.d
		if err := checkRange("max-backoff", hi, 0, maxBackoff); err != nil {
			return nil, err
		}
	}
	if lo > hi {
		return nil, usagef("--min-backoff %s is above --max-backoff %s", fmtDuration(lo), fmtDuration(hi))
	}
	return &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(lo), MaximumBackoff: durationpb.New(hi)}, nil
}

// checkFilter checks --filter's length and encoding before any RPC, so
// that a bad filter is a usage error (exit 2) like the other flags.
func (s *subscriptionFlags) checkFilter() error {
	if len(s.filter) > maxFilterBytes {
		return usagef("--filter is %d bytes: want at most %d", len(s.filter), maxFilterBytes)
	}
	if !utf8.ValidString(s.filter) {
		return usagef("--filter is not valid UTF-8")
	}
	return nil
}

func subscriptionsCreateCommand(o *adminOptions) *cobra.Command {
	var s subscriptionFlags
	var c *cobra.Command
	c = nameCommand(o, subscriptionResource, "create [flags] SUBSCRIPTION --topic TOPIC", "create a subscription", `
Creates SUBSCRIPTION on TOPIC and prints it. It receives the messages
published after it was created. A subscription that exists already, or a
topic or dead-letter topic that does not, is an error (exit 1).

A dead-letter topic takes the messages that failed --max-delivery-attempts
times: give it a subscription of its own before messages fail, since a topic
with no subscription drops what it receives.`, func(name string) (adminRun, error) {
		req, err := s.build(o, name, c.Flags())
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, a *adminClient) error {
			sub, err := a.sub.CreateSubscription(ctx, req)
			return subscriptionResource.created(a, "creating subscription "+name, name, sub, err)
		}, nil
	})
	s.register(c.Flags())
	completeFlag(c, "topic", topicResource.complete(&o.ep, false))
	completeFlag(c, "dead-letter-topic", topicResource.complete(&o.ep, false))
	return c
}

func subscriptionsSeekCommand(o *adminOptions) *cobra.Command {
	var at, snapshot string
	c := nameCommand(o, subscriptionResource, "seek [flags] SUBSCRIPTION (--time T | --snapshot S)", "replay or skip messages: seek to a time or a snapshot", `
With --time, messages published before T count as acked and those published
after it as unacked: an earlier time replays the acked messages the
subscription kept (--retain-acked, or the topic's --retention), and
"--time now" skips the whole backlog. With --snapshot, the subscription's
acks become those of the snapshot (see pubsubflow snapshots create).`, func(name string) (adminRun, error) {
		req := &pubsubpb.SeekRequest{Subscription: name}
		result := map[string]string{"subscription": name}
		switch {
		case (at == "") == (snapshot == ""):
			return nil, usagef("want one of --time or --snapshot")
		case at != "":
			t, err := parseSeekTime(at, time.Now())
			if err != nil {
				return nil, err
			}
			req.Target = &pubsubpb.SeekRequest_Time{Time: timestamppb.New(t)}
			result["time"] = t.UTC().Format(time.RFC3339Nano)
		default:
			snap, err := o.ep.resolve("snapshots", snapshot)
			if err != nil {
				return nil, err
			}
			req.Target = &pubsubpb.SeekRequest_Snapshot{Snapshot: snap}
			result["snapshot"] = snap
		}
		return func(ctx context.Context, a *adminClient) error {
			if _, err := a.sub.Seek(ctx, req); err != nil {
				return a.failed("seeking subscription "+name, "", err)
			}
			if a.json {
				return a.printJSON(result)
			}
			var t table
			t.row("subscription", name)
			if req.GetSnapshot() != "" {
				t.row("sought to snapshot", req.GetSnapshot())
			} else {
				t.row("sought to time", result["time"])
			}
			return t.write(a.out)
		}, nil
	})
	c.Flags().StringVar(&at, "time", "", `seek to this time: RFC 3339 (2026-01-02T15:04:05Z), "now", or a duration ago ("-1h")`)
	c.Flags().StringVar(&snapshot, "snapshot", "", "seek to this snapshot (of the subscription's topic)")
	c.ValidArgsFunction = subscriptionResource.complete(&o.ep, true)
	completeFlag(c, "snapshot", snapshotResource.complete(&o.ep, false))
	return c
}

// parseSeekTime reads --time: RFC 3339, "now", or "-DURATION" before now.
func parseSeekTime(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if ago, ok := strings.CutPrefix(s, "-"); ok {
		d, err := parseDuration(ago)
		if err != nil {
			return time.Time{}, usagef("--time %q: %v", s, err)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef(`--time %q: want RFC 3339 (2026-01-02T15:04:05Z), "now", or a duration ago such as -1h`, s)
	}
	return t, nil
}

// subscriptionResource is how the admin commands read, delete and print
// subscriptions.
var subscriptionResource = resource[*pubsubpb.Subscription]{
	kind: "subscriptions", noun: "subscription", arg: "SUBSCRIPTION",
	get: func(ctx context.Context, a *adminClient, name string) (*pubsubpb.Subscription, error) {
		return a.sub.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
	},
	list: func(ctx context.Context, a *adminClient, project, token string) ([]*pubsubpb.Subscription, string, error) {
		r, err := a.sub.ListSubscriptions(ctx, &pubsubpb.ListSubscriptionsRequest{Project: project, PageSize: listPageSize, PageToken: token})
		return r.GetSubscriptions(), r.GetNextPageToken(), err
	},
	del: func(ctx context.Context, a *adminClient, name string) error {
		_, err := a.sub.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name})
		return err
	},
	fields: subscriptionFields,
	header: []any{"SUBSCRIPTION", "TOPIC", "ACK DEADLINE", "SETTINGS"},
	row:    subscriptionRow,
}
