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
				a, err := o.connect(ctx, env)
				if err != nil {
					return err
				}
				defer a.Close()
				snap, err := adminCall(ctx, a, func(ctx context.Context) (*pubsubpb.Snapshot, error) {
					return a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: name, Subscription: sub})
				})
				if err != nil {
					return a.failedCreate("creating snapshot "+name+" of "+sub, "snapshot "+name, err)
				}
				return a.printSnapshot(snap)
			}
		},
	}
}

func snapshotsListCommand() command {
	return command{
		name:    "snapshots list",
		summary: "list a project's snapshots",
		usage: `Usage: pubsubflow snapshots list [flags]

Lists the snapshots of the project (--project, else $PUBSUB_PROJECT_ID)
with their topic and expiry.` + adminUsageTail,
		flags: func(fs *flag.FlagSet) func(context.Context, cliEnv, []string) error {
			var o adminOptions
			o.register(fs)
			return func(ctx context.Context, env cliEnv, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				project, err := o.project()
				if err != nil {
					return err
				}
				a, err := o.connect(ctx, env)
				if err != nil {
					return err
				}
				defer a.Close()
				snaps, err := listAll(ctx, a, "listing the snapshots of "+project, func(ctx context.Context, token string) ([]*pubsubpb.Snapshot, string, error) {
					r, err := a.sub.ListSnapshots(ctx, &pubsubpb.ListSnapshotsRequest{Project: project, PageSize: listPageSize, PageToken: token})
					return r.GetSnapshots(), r.GetNextPageToken(), err
				})
				if err != nil {
					return err
				}
				if a.json {
					return printJSONList(a.out, snaps)
				}
				return writeSnapshotTable(a.out, project, snaps)
			}
		},
	}
}

func snapshotsDeleteCommand() command {
	return command{
		name:    "snapshots delete",
		summary: "delete a snapshot",
		usage: `Usage: pubsubflow snapshots delete [flags] SNAPSHOT

Deletes SNAPSHOT.` + adminUsageTail,
		flags: func(fs *flag.FlagSet) func(context.Context, cliEnv, []string) error {
			var o adminOptions
			o.register(fs)
			return func(ctx context.Context, env cliEnv, args []string) error {
				name, err := o.one(args, "snapshots", "SNAPSHOT")
				if err != nil {
					return err
				}
				a, err := o.connect(ctx, env)
				if err != nil {
					return err
				}
				defer a.Close()
				if err := a.call(ctx, func(ctx context.Context) error {
					_, err := a.sub.DeleteSnapshot(ctx, &pubsubpb.DeleteSnapshotRequest{Snapshot: name})
					return err
				}); err != nil {
					return a.failed("deleting snapshot "+name, "snapshot "+name, err)
				}
				return a.printDeleted("snapshot", name)
			}
		},
	}
}
