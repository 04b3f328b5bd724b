package publisher

import (
	"context"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The basic publish test against Google's fake server as a second peer.
func TestPublishBasicPstest(t *testing.T) {
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	const topic = "projects/p/topics/topic"
	if _, err := pubsubpb.NewPublisherClient(conn).CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	p, err := New(conn, topic, Config{EnableOrdering: true, MaxMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	const n = 250
	var results []*Result
	for i := range n {
		m := msg(i)
		if i%2 == 0 {
			m.OrderingKey = "k"
		}
		results = append(results, p.Publish(ctx, m))
	}
	ids := map[string]string{}
	for i, r := range results {
		ids[mustGet(t, r)] = string(msg(i).Data)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("%d distinct ids", len(ids))
	}
	got := srv.Messages()
	if len(got) != n {
		t.Fatalf("pstest has %d messages", len(got))
	}
	for _, m := range got {
		if ids[m.ID] != string(m.Data) {
			t.Fatalf("message %s has data %q, want %q", m.ID, m.Data, ids[m.ID])
		}
	}
}
