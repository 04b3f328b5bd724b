package publisher

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// With PUBSUB_EMULATOR_HOST set and zero ConnectOptions, Dial reaches the
// emulator in plaintext over TCP, runs the caller's interceptors, and Close
// closes the connection it made.
func TestDialFollowsEmulatorHost(t *testing.T) {
	e := newEnv(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", e.srv.Addr())
	var seen []string
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		seen = append(seen, method) // one sender: MaxInFlightBatches 1
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	p, err := Dial(context.Background(), e.topic, ConnectOptions{UnaryInterceptors: []grpc.UnaryClientInterceptor{count}}, Config{MaxInFlightBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	id := mustGet(t, p.Publish(context.Background(), msg(1)))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if id == "" || e.srv.SubscriptionStats(e.sub).Published != 1 {
		t.Fatalf("id %q, server has %d messages", id, e.srv.SubscriptionStats(e.sub).Published)
	}
	if len(seen) != 1 || seen[0] != "/google.pubsub.v1.Publisher/Publish" {
		t.Fatalf("interceptor saw %v", seen)
	}
	if s := p.conn.(*grpc.ClientConn).GetState(); s != connectivity.Shutdown {
		t.Fatalf("connection is %v after Close, want SHUTDOWN", s)
	}
}

// Without the emulator variable, Dial takes the production path, TLS with
// Application Default Credentials, and says so when there are none.
func TestDialWithoutEmulatorNeedsADC(t *testing.T) {
	t.Setenv("PUBSUB_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "absent.json"))
	_, err := Dial(context.Background(), "projects/p/topics/topic", ConnectOptions{}, Config{})
	if err == nil || !strings.Contains(err.Error(), "application default credentials") {
		t.Fatalf("err = %v, want an application default credentials error", err)
	}
}

// Options that cannot work together fail Dial before anything is made, as
// they fail pubsubflow.Dial; a bad Config closes the connection made.
func TestDialRejectsBadOptions(t *testing.T) {
	ts := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "x"})
	_, err := Dial(context.Background(), "projects/p/topics/topic", ConnectOptions{Insecure: true, TokenSource: ts}, Config{})
	if err == nil || !strings.Contains(err.Error(), "cannot be combined with Insecure") {
		t.Fatalf("err = %v", err)
	}
	_, err = Dial(context.Background(), "projects/p/topics/topic", ConnectOptions{Endpoint: "localhost:1", Insecure: true}, Config{MaxMessages: -1})
	if err == nil || !strings.Contains(err.Error(), "Config.MaxMessages") {
		t.Fatalf("err = %v", err)
	}
}
