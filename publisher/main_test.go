package publisher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func TestMain(m *testing.M) {
	// Google's client (imported by the side-by-side benchmark) starts
	// OpenCensus's stats worker in a package init; it is not ours to stop.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// env is a pubsubtest server with topic "t" and subscription "s" on it.
type env struct {
	srv   *pubsubtest.Server
	topic string
	sub   string
}

// newEnv starts a server that the test's cleanup closes. Inside a synctest
// bubble pass pubsubtest.WithBufconn().
func newEnv(t testing.TB, opts ...pubsubtest.Option) *env {
	t.Helper()
	f := pubsubtest.NewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: 60 * time.Second}, opts...)
	return &env{srv: f.Server, topic: f.Topic, sub: f.Sub}
}

// publisher returns a Publisher over the server's connection (or over
// client when given), closed by the test's cleanup.
func (e *env) publisher(t testing.TB, cfg Config, client ...pubsubpb.PublisherClient) *Publisher {
	t.Helper()
	var p *Publisher
	var err error
	if len(client) > 0 {
		p, err = NewFromClient(client[0], e.topic, cfg)
	} else {
		p, err = New(e.srv.ClientConn(), e.topic, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (e *env) calls() int64 { return e.srv.MethodStats("Publish").Calls }

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func msg(i int) *Message { return &Message{Data: fmt.Appendf(nil, "m%d", i)} }

// mustGet returns a result's id, failing the test on error.
func mustGet(t testing.TB, r *Result) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := r.Get(ctx)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return id
}

func settled(r *Result) bool {
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// recorder wraps a PublisherClient and records every Publish request and
// the most Publish calls in flight at once per ordering key.
type recorder struct {
	pubsubpb.PublisherClient
	mu       sync.Mutex
	reqs     []*pubsubpb.PublishRequest
	inFlight map[string]int
	maxPer   map[string]int
}

func newRecorder(c pubsubpb.PublisherClient) *recorder {
	return &recorder{PublisherClient: c, inFlight: map[string]int{}, maxPer: map[string]int{}}
}

func (r *recorder) Publish(ctx context.Context, req *pubsubpb.PublishRequest, opts ...grpc.CallOption) (*pubsubpb.PublishResponse, error) {
	key := req.Messages[0].OrderingKey
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.inFlight[key]++
	r.maxPer[key] = max(r.maxPer[key], r.inFlight[key])
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight[key]--
		r.mu.Unlock()
	}()
	return r.PublisherClient.Publish(ctx, req, opts...)
}

func (r *recorder) requests() []*pubsubpb.PublishRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pubsubpb.PublishRequest(nil), r.reqs...)
}
