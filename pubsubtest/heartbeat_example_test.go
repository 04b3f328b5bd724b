package pubsubtest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// A server that never answers heartbeats, as Google's emulator: a client's
// watchdog must not take the silence for a dead stream.
func ExampleWithoutHeartbeatAnswers() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := pubsubtest.NewServer(pubsubtest.WithoutHeartbeatAnswers())
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.CreateTopic(ctx, "topic"); err != nil {
		log.Fatal(err)
	}
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic"})
	if err != nil {
		log.Fatal(err)
	}

	stream, err := pubsubpb.NewSubscriberClient(srv.ClientConn()).StreamingPull(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// protocol_version 1 asks for answers to heartbeats; this server sends none.
	if err := stream.Send(&pubsubpb.StreamingPullRequest{Subscription: sub, StreamAckDeadlineSeconds: 60, ProtocolVersion: 1}); err != nil {
		log.Fatal(err)
	}
	if err := stream.Send(&pubsubpb.StreamingPullRequest{}); err != nil { // a heartbeat
		log.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if st := srv.Streams(sub); len(st) == 1 && st[0].Heartbeats == 1 {
			fmt.Println("heartbeats", st[0].Heartbeats, "answered", st[0].HeartbeatReplies)
			break
		}
		if time.Now().After(deadline) {
			log.Fatal("the heartbeat did not reach the server")
		}
	}
	// Output:
	// heartbeats 1 answered 0
}
