package pubsubtest

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// TestGoogleClientRefusedFields: a field pubsubtest does not implement is
// refused with an error naming it, never stored and ignored.
func TestGoogleClientRefusedFields(t *testing.T) {
	srv, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	a := newAdmin(t, srv)
	ctx := context.Background()

	for _, tc := range []struct {
		topic *pubsubpb.Topic
		field string
	}{
		{&pubsubpb.Topic{KmsKeyName: "projects/p/locations/l/keyRings/r/cryptoKeys/k"}, "kms_key_name"},
		{&pubsubpb.Topic{SchemaSettings: &pubsubpb.SchemaSettings{Schema: "projects/p/schemas/s"}}, "schema_settings"},
		{&pubsubpb.Topic{IngestionDataSourceSettings: &pubsubpb.IngestionDataSourceSettings{}}, "ingestion_data_source_settings"},
	} {
		tc.topic.Name = srv.topicName("refused")
		_, err := a.top.CreateTopic(ctx, tc.topic)
		wantCode(t, "CreateTopic with "+tc.field, err, codes.Unimplemented, tc.field)
	}
	a.topic("topic", 0)
	_, err = a.top.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: srv.topicName("topic"), KmsKeyName: "k"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"kms_key_name"}},
	})
	wantCode(t, "UpdateTopic of kms_key_name", err, codes.Unimplemented, "kms_key_name")

	for _, tc := range []struct {
		sub   *pubsubpb.Subscription
		field string
	}{
		{&pubsubpb.Subscription{PushConfig: &pubsubpb.PushConfig{PushEndpoint: "https://example.com/push"}}, "push_config"},
		{&pubsubpb.Subscription{BigqueryConfig: &pubsubpb.BigQueryConfig{Table: "p.d.t"}}, "bigquery_config"},
		{&pubsubpb.Subscription{CloudStorageConfig: &pubsubpb.CloudStorageConfig{Bucket: "b"}}, "cloud_storage_config"},
		{&pubsubpb.Subscription{ExpirationPolicy: &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(48 * time.Hour)}}, "expiration_policy.ttl"},
	} {
		tc.sub.Name, tc.sub.Topic = srv.subName("refused"), srv.topicName("topic")
		_, err := a.sub.CreateSubscription(ctx, tc.sub)
		wantCode(t, "CreateSubscription with "+tc.field, err, codes.Unimplemented, tc.field)
	}
	// A subscription that never expires, labels and an empty push config
	// (pull) are what pubsubtest does: accepted.
	got, err := a.sub.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: srv.subName("sub"), Topic: srv.topicName("topic"), Labels: map[string]string{"team": "x"},
		ExpirationPolicy: &pubsubpb.ExpirationPolicy{}, PushConfig: &pubsubpb.PushConfig{},
	})
	if err != nil || got.Labels["team"] != "x" || got.State != pubsubpb.Subscription_ACTIVE {
		t.Fatalf("CreateSubscription = %v, %v", got, err)
	}
	err = a.sub.ModifyPushConfig(ctx, &pubsubpb.ModifyPushConfigRequest{
		Subscription: srv.subName("sub"), PushConfig: &pubsubpb.PushConfig{PushEndpoint: "https://example.com/push"},
	})
	wantCode(t, "ModifyPushConfig to push", err, codes.Unimplemented, "push_config")
	_, err = a.sub.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{Name: srv.subName("sub"), BigqueryConfig: &pubsubpb.BigQueryConfig{Table: "p.d.t"}},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"bigquery_config"}},
	})
	wantCode(t, "UpdateSubscription of bigquery_config", err, codes.Unimplemented, "bigquery_config")
	_, err = a.sub.CreateSubscription(ctx, &pubsubpb.Subscription{Name: srv.subName("detached"), Topic: srv.topicName("topic"), Detached: true})
	wantCode(t, "CreateSubscription detached", err, codes.InvalidArgument, "detached")
}
