package source_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestPlainConsumptionAgainstPstest: the plain consumption path also works
// against Google's fake, over loopback TCP, dialed the emulator way.
func TestPlainConsumptionAgainstPstest(t *testing.T) {
	srv := pstest.NewServer()
	defer srv.Close()
	t.Setenv(pubsubflow.EmulatorHostEnv, srv.Addr)
	cc, err := pubsubflow.Dial(context.Background(), pubsubflow.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic, sub := "projects/p/topics/topic", "projects/p/subscriptions/sub"
	if _, err := pubsubpb.NewPublisherClient(cc).CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	client := pubsubpb.NewSubscriberClient(cc)
	if _, err := client.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: topic, AckDeadlineSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	want := make(map[string]bool, n)
	for i := range n {
		want[srv.Publish(topic, fmt.Appendf(nil, "m%d", i), map[string]string{"i": fmt.Sprint(i)})] = true
	}

	src, err := source.Subscribe(client, source.Config{Subscription: sub, MaxOutstandingMessages: 50})
	if err != nil {
		t.Fatal(err)
	}
	g := stage.NewGroup(ctx)
	out := src.Run(g)
	for len(want) > 0 {
		m, ok := <-out
		if !ok {
			t.Fatalf("output closed with %d messages missing: %v", len(want), g.Err())
		}
		if string(m.Data) != "m"+m.Attributes["i"] {
			t.Fatalf("message %s: data %q, attributes %v", m.ID, m.Data, m.Attributes)
		}
		delete(want, m.ID)
		m.Ack()
	}
	src.Stop()
	g.Cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
