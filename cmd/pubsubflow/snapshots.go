package main

import (
	"context"
	"flag"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

func snapshotsGroup() commandGroup {
	return commandGroup{
		name:    "snapshots",
		summary: "create, list or delete snapshots of a subscription's acks",
		usage: `Usage: pubsubflow snapshots COMMAND [flags] [SNAPSHOT]

Manages snapshots: a subscription's acks at one moment, which "pubsubflow
subscriptions seek --snapshot" restores on any subscription of the same
topic.`,
		verbs: []command{snapshotsCreateCommand(), snapshotsListCommand(), snapshotsDeleteCommand()},
	}
}

func snapshotsCreateCommand() command {
	return command{
		name:    "snapshots create",
		summary: "snapshot a subscription's acks",
		usage: `Usage: pubsubflow snapshots create [flags] SNAPSHOT --subscription SUBSCRIPTION

Creates SNAPSHOT of SUBSCRIPTION: the messages unacked now, and those
published later, are unacked in the snapshot. It prints the snapshot and
when it expires (the service keeps it at most 7 days, and no longer than
the oldest unacked message).` + adminUsageTail,
		flags: func(fs *flag.FlagSet) func(context.Context, cliEnv, []string) error {
			var o adminOptions
			o.register(fs)
			var subscription string
			fs.StringVar(&subscription, "subscription", "", "the `subscription` whose acks the snapshot keeps (required)")
			return func(ctx context.Context, env cliEnv, args []string) error {
				name, err := o.one(args, "snapshots", "SNAPSHOT")
				if err != nil {
					return err
				}
				if subscription == "" {
					return usagef("missing --subscription: the subscription to snapshot")
				}
				sub, err := o.resolve("subscriptions", subscription)
				if err != nil {
					return err
				}
				return o.connected(ctx, env, func(a *adminClient) error {
					snap, err := adminCall(ctx, a, func(ctx context.Context) (*pubsubpb.Snapshot, error) {
						return a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: name, Subscription: sub})
					})
					if err != nil {
						return a.failedCreate("creating snapshot "+name+" of "+sub, "snapshot "+name, err)
					}
					return a.printSnapshot(snap)
				})
			}
		},
	}
}

func snapshotsListCommand() command {
	return listCommand(snapshotResource, "list a project's snapshots", `Usage: pubsubflow snapshots list [flags]

Lists the snapshots of the project (--project, else $PUBSUB_PROJECT_ID)
with their topic and expiry.`)
}

func snapshotsDeleteCommand() command {
	return deleteCommand(snapshotResource, "delete a snapshot", `Usage: pubsubflow snapshots delete [flags] SNAPSHOT

Deletes SNAPSHOT.`)
}

// snapshotResource is how the admin commands list and delete snapshots
// (the API has a get, the CLI has no use for it).
var snapshotResource = resource[*pubsubpb.Snapshot]{
	kind: "snapshots", noun: "snapshot", arg: "SNAPSHOT",
	list: func(ctx context.Context, a *adminClient, project, token string) ([]*pubsubpb.Snapshot, string, error) {
		r, err := a.sub.ListSnapshots(ctx, &pubsubpb.ListSnapshotsRequest{Project: project, PageSize: listPageSize, PageToken: token})
		return r.GetSnapshots(), r.GetNextPageToken(), err
	},
	del: func(ctx context.Context, a *adminClient, name string) error {
		_, err := a.sub.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: name})
		return err
	},
	table: writeSnapshotTable,
}
