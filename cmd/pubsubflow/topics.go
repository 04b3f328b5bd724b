package main

import (
	"context"
	"flag"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func topicsGroup() commandGroup {
	return commandGroup{
		name:    "topics",
		summary: "create, get, list or delete topics",
		usage: `Usage: pubsubflow topics COMMAND [flags] [TOPIC]

Manages topics over the Pub/Sub API, on pubsubflow emulator, Google's
emulator or Pub/Sub itself.`,
		verbs: []command{topicsCreateCommand(), topicsGetCommand(), topicsListCommand(), topicsDeleteCommand()},
	}
}

func topicsCreateCommand() command {
	return command{
		name:    "topics create",
		summary: "create a topic",
		usage: `Usage: pubsubflow topics create [flags] TOPIC

Creates TOPIC and prints it. A topic that exists already is an error
(exit 1). Messages published to a topic with no subscription are lost:
create the subscriptions before publishing.` + adminUsageTail,
		flags: func(fs *flag.FlagSet) func(context.Context, cliEnv, []string) error {
			var o adminOptions
			o.register(fs)
			var retention durationValue
			fs.Var(&retention, "retention", "keep published messages this `duration` (10m–31d), acked or not, so subscriptions can seek back (default: the service's, none)")
			return func(ctx context.Context, env cliEnv, args []string) error {
				name, err := o.one(args, "topics", "TOPIC")
				if err != nil {
					return err
				}
				req := &pubsubpb.Topic{Name: name}
				if retention.set {
					if err := checkRange("retention", retention.d, minRetention, maxTopicRetention); err != nil {
						return err
					}
					req.MessageRetentionDuration = durationpb.New(retention.d)
				}
				return o.connected(ctx, env, func(a *adminClient) error {
					t, err := adminCall(ctx, a, func(ctx context.Context) (*pubsubpb.Topic, error) {
						return a.pub.CreateTopic(ctx, req)
					})
					if err != nil {
						return a.failed("creating topic "+name, "topic "+name, err)
					}
					return a.printTopic(t)
				})
			}
		},
	}
}

func topicsGetCommand() command {
	return getCommand(topicResource, "print a topic", `Usage: pubsubflow topics get [flags] TOPIC

Prints TOPIC's settings.`)
}

func topicsListCommand() command {
	return listCommand(topicResource, "list a project's topics", `Usage: pubsubflow topics list [flags]

Lists the topics of the project (--project, else $PUBSUB_PROJECT_ID).`)
}

func topicsDeleteCommand() command {
	return deleteCommand(topicResource, "delete a topic", `Usage: pubsubflow topics delete [flags] TOPIC

Deletes TOPIC. Its subscriptions remain, detached from any topic (their
topic reads "_deleted-topic_"), until they are deleted too.`)
}

// topicResource is how the admin commands read and delete topics.
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
	print: (*adminClient).printTopic,
	table: writeTopicTable,
}
