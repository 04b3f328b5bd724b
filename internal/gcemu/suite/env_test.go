package suite

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// project is the emulator project every test uses; the emulator accepts
// any id.
const project = "pubsubflow-suite"

// adminTimeout bounds one admin or publish call to the emulator.
const adminTimeout = 30 * time.Second

// env is a test's view of the shared emulator: its address, a connection
// for our Subscriber and Publisher, and Google's client for admin calls.
type env struct {
	addr   string
	conn   *grpc.ClientConn
	google *pubsub.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	addr := emu.Addr(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &env{addr: addr, conn: conn, google: googleClient(t, addr)}
}

// googleClient is Google's client for the emulator at addr, set up as
// PUBSUB_EMULATOR_HOST would (plaintext, no credentials), without touching
// the process environment so tests can run in parallel.
func googleClient(t *testing.T, addr string) *pubsub.Client {
	t.Helper()
	c, err := pubsub.NewClient(context.Background(), project,
		option.WithEndpoint(addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithTelemetryDisabled(),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var nameSeq atomic.Int64

// name is a resource id unique in this test binary, readable in the
// emulator log: the test's name, cleaned to the allowed characters.
func name(t *testing.T, what string) string {
	id := regexp.MustCompile(`[^A-Za-z0-9-]+`).ReplaceAllString(t.Name(), "-")
	return fmt.Sprintf("%s-%s-%d", what, id, nameSeq.Add(1))
}

func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// topic creates a topic and returns its full name.
func (e *env) topic(t *testing.T) string {
	t.Helper()
	full := "projects/" + project + "/topics/" + name(t, "t")
	if _, err := e.google.TopicAdminClient.CreateTopic(bounded(t, adminTimeout), &pubsubpb.Topic{Name: full}); err != nil {
		t.Fatalf("CreateTopic %s: %v", full, err)
	}
	return full
}

// subscription creates a subscription from sub (Name and Topic filled in
// if empty) and returns its full name.
func (e *env) subscription(t *testing.T, topic string, sub *pubsubpb.Subscription) string {
	t.Helper()
	if sub == nil {
		sub = &pubsubpb.Subscription{}
	}
	if sub.Name == "" {
		sub.Name = "projects/" + project + "/subscriptions/" + name(t, "s")
	}
	sub.Topic = topic
	if _, err := e.google.SubscriptionAdminClient.CreateSubscription(bounded(t, adminTimeout), sub); err != nil {
		t.Fatalf("CreateSubscription %s: %v", sub.Name, err)
	}
	return sub.Name
}

// publish publishes n messages with attribute seq = 0…n-1 and data of
// size bytes, by raw Publish calls of 1,000 (Google's admin client), and
// returns their message ids in order.
func (e *env) publish(t *testing.T, topic string, n, size int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 1000 {
		var msgs []*pubsubpb.PubsubMessage
		for i := start; i < min(n, start+1000); i++ {
			data := make([]byte, size)
			copy(data, strconv.Itoa(i))
			msgs = append(msgs, &pubsubpb.PubsubMessage{Data: data, Attributes: map[string]string{"seq": strconv.Itoa(i)}})
		}
		resp, err := e.google.TopicAdminClient.Publish(bounded(t, adminTimeout), &pubsubpb.PublishRequest{Topic: topic, Messages: msgs})
		if err != nil {
			t.Fatalf("Publish to %s: %v", topic, err)
		}
		ids = append(ids, resp.GetMessageIds()...)
	}
	return ids
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not asserting with time
	}
}
