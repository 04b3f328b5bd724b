package main

import (
	"context"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
)

func topicsCommand() *cobra.Command {
	o := new(adminOptions)
	return adminGroup(o, "topics COMMAND [flags] [TOPIC]", "create, get, list or delete topics", `
Manages topics over the Pub/Sub API, on pubsubflow emulator, Google's
emulator or Pub/Sub itself.`,
		topicsCreateCommand(o),
		getCommand(o, topicResource, "print a topic", "Prints TOPIC's settings."),
		listCommand(o, topicResource, "list a project's topics",
			`
Lists the topics of the project (--project, else the first set of
$PUBSUB_PROJECT_ID, $GOOGLE_CLOUD_PROJECT and $CLOUDSDK_CORE_PROJECT).`),
		deleteCommand(o, topicResource, "delete a topic", `
Deletes TOPIC. Its subscriptions remain, detached from any topic (their
topic reads "_deleted-topic_"), until they are deleted too.`))
}

func topicsCreateCommand(o *adminOptions) *cobra.Command {
	var retention durationValue
	c := nameCommand(o, topicResource, "create [flags] TOPIC", "create a topic", `
Creates TOPIC and prints it. A topic that exists already is an error
(exit 1). Messages published to a topic with no subscription are lost:
create the subscriptions before publishing.`, func(name string) (adminRun, error) {
		req := &pubsubpb.Topic{Name: name}
		if retention.set {
			if err := checkRange("retention", retention.d, minRetention, maxTopicRetention); err != nil {
				return nil, err
			}
			req.MessageRetentionDuration = durationpb.New(retention.d)
		}
		return func(ctx context.Context, a *adminClient) error {
			t, err := a.pub.CreateTopic(ctx, req)
			return topicResource.created(a, "creating topic "+name, name, t, err)
		}, nil
	})
	c.Flags().Var(&retention, "retention", "keep published messages this `duration` (10m–31d), acked or not, so subscriptions can seek back (default: the service's, none)")
	return c
}

// topicResource is how the admin commands read, delete and print topics.
var topicResource = resource[*pubsubpb.Topic]{
	kind: "topics", noun: "topic", arg: "TOPIC",
	get: func(ctx context.Context, a *adminClient, name string) (*pubsubpb.Topic, error) {
		return a.pub.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
	},
	list: func(ctx context.Context, a *adminClient, project, token string) ([]*pubsubpb.Topic, string, error) {
		r, err := a.pub.ListTopics(ctx, &pubsubpb.ListTopicsRequest{Project: project, PageSize: listPageSize, PageToken: token})
		return r.GetTopics(), r.GetNextPageToken(), err
	},
	del: func(ctx context.Context, a *adminClient, name string) error {
		_, err := a.pub.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: name})
		return err
	},
	fields: topicFields,
	header: []any{"TOPIC", "RETENTION", "LABELS"},
	row:    topicRow,
}
