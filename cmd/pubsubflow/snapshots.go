package main

import (
	"context"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/spf13/cobra"
)

func snapshotsCommand() *cobra.Command {
	o := new(adminOptions)
	return adminGroup(o, "snapshots COMMAND [flags] [SNAPSHOT]", "create, list or delete snapshots of a subscription's acks", `
Manages snapshots: a subscription's acks at one moment, which "pubsubflow
subscriptions seek --snapshot" restores on any subscription of the same
topic.`,
		snapshotsCreateCommand(o),
		listCommand(o, snapshotResource, "list a project's snapshots", `
Lists the snapshots of the project (--project, else the first set of
$PUBSUB_PROJECT_ID, $GOOGLE_CLOUD_PROJECT and $CLOUDSDK_CORE_PROJECT) with
their topic and expiry.`),
		deleteCommand(o, snapshotResource, "delete a snapshot", "Deletes SNAPSHOT."))
}

func snapshotsCreateCommand(o *adminOptions) *cobra.Command {
	var subscription string
	c := nameCommand(o, snapshotResource, "create [flags] SNAPSHOT --subscription SUBSCRIPTION", "snapshot a subscription's acks", `
Creates SNAPSHOT of SUBSCRIPTION: the messages unacked now, and those
published later, are unacked in the snapshot. It prints the snapshot and
when it expires (the service keeps it at most 7 days, and no longer than
the oldest unacked message).`, func(name string) (adminRun, error) {
		if subscription == "" {
			return nil, usagef("missing --subscription: the subscription to snapshot")
		}
		sub, err := o.ep.resolve("subscriptions", subscription)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, a *adminClient) error {
			snap, err := a.sub.CreateSnapshot(ctx, &pubsubpb.CreateSnapshotRequest{Name: name, Subscription: sub})
			return snapshotResource.created(a, "creating snapshot "+name+" of "+sub, name, snap, err)
		}, nil
	})
	c.Flags().StringVar(&subscription, "subscription", "", "the `subscription` whose acks the snapshot keeps (required)")
	completeFlag(c, "subscription", subscriptionResource.complete(&o.ep, false))
	return c
}

// snapshotResource is how the admin commands list, delete and print
// snapshots (the API has a get, the CLI has no use for it).
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
	fields: snapshotFields,
	header: []any{"SNAPSHOT", "TOPIC", "EXPIRES"},
	row:    snapshotRow,
}
