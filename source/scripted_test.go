package source

import (
	"context"
	"net"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"
)

// scripted is a misbehaving Subscriber server for the tests: stream n (1
// for the first) runs script, which sends what it likes and ends the
// stream with what it returns; the acks and nacks it receives by unary
// call are recorded.
type scripted struct {
	pubsubpb.UnimplementedSubscriberServer
	script func(n int, ss pubsubpb.Subscriber_StreamingPullServer) error

	mu      sync.Mutex
	streams int
	acks    []string
	nacks   []string
}

func (f *scripted) StreamingPull(ss pubsubpb.Subscriber_StreamingPullServer) error {
	f.mu.Lock()
	f.streams++
	n := f.streams
	f.mu.Unlock()
	return f.script(n, ss)
}

func (f *scripted) Acknowledge(_ context.Context, in *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, in.AckIds...)
	return &emptypb.Empty{}, nil
}

func (f *scripted) ModifyAckDeadline(_ context.Context, in *pubsubpb.ModifyAckDeadlineRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.AckDeadlineSeconds == 0 {
		f.nacks = append(f.nacks, in.AckIds...)
	}
	return &emptypb.Empty{}, nil
}

// counts returns the streams opened and copies of the acks and nacks.
func (f *scripted) counts() (streams int, acks, nacks []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streams, append([]string(nil), f.acks...), append([]string(nil), f.nacks...)
}

// serveScripted serves f over gRPC on an in-memory listener (usable in a
// synctest bubble) and returns a client of it; both close when the test
// ends.
func serveScripted(t *testing.T, f *scripted) pubsubpb.SubscriberClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pubsubpb.RegisterSubscriberServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
	})
	return pubsubpb.NewSubscriberClient(cc)
}

// holdOpen keeps a scripted stream open until the client ends it.
func holdOpen(ss pubsubpb.Subscriber_StreamingPullServer) error {
	<-ss.Context().Done()
	return nil
}
