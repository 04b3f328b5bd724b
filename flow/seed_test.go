package flow_test

// The three reproductions of the reference issue, written against the
// public operators with stub SubscriberClients: no server, no gRPC
// transport, as the issue describes them.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
)

const seedSub = "projects/p/subscriptions/seed"

// stubClient is a SubscriberClient without a server. Its StreamingPull
// records every request and answers with batches of perResponse fresh
// messages as fast as the client reads (each heartbeat gets an empty
// answer); its ModifyAckDeadline and Acknowledge record the ack ids.
type stubClient struct {
	pubsubpb.SubscriberClient // nil: other methods panic
	perResponse               int

	mu       sync.Mutex
	requests []*pubsubpb.StreamingPullRequest
	sent     int
	modacked map[string]bool
	acked    int
}

func (c *stubClient) StreamingPull(ctx context.Context, _ ...grpc.CallOption) (pubsubpb.Subscriber_StreamingPullClient, error) {
	return &stubStream{c: c, ctx: ctx, answers: make(chan struct{}, 16)}, nil
}

func (c *stubClient) ModifyAckDeadline(_ context.Context, in *pubsubpb.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range in.AckIds {
		c.modacked[id] = true
	}
	return &emptypb.Empty{}, nil
}

func (c *stubClient) Acknowledge(_ context.Context, in *pubsubpb.AcknowledgeRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked += len(in.AckIds)
	return &emptypb.Empty{}, nil
}

func (c *stubClient) snapshot() (requests []*pubsubpb.StreamingPullRequest, sent, modacked int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*pubsubpb.StreamingPullRequest(nil), c.requests...), c.sent, len(c.modacked)
}

type stubStream struct {
	grpc.ClientStream // nil: unused methods panic
	c                 *stubClient
	ctx               context.Context
	answers           chan struct{}
}

func (s *stubStream) Send(req *pubsubpb.StreamingPullRequest) error {
	s.c.mu.Lock()
	s.c.requests = append(s.c.requests, proto.Clone(req).(*pubsubpb.StreamingPullRequest))
	n := len(s.c.requests)
	s.c.mu.Unlock()
	if n > 1 {
		s.answers <- struct{}{} // a heartbeat's answer
	}
	return nil
}

func (s *stubStream) Recv() (*pubsubpb.StreamingPullResponse, error) {
	select {
	case <-s.answers:
		return &pubsubpb.StreamingPullResponse{}, nil
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	default:
	}
	if s.c.perResponse == 0 {
		select {
		case <-s.answers:
			return &pubsubpb.StreamingPullResponse{}, nil
		case <-s.ctx.Done():
			return nil, status.FromContextError(s.ctx.Err()).Err()
		}
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	resp := &pubsubpb.StreamingPullResponse{}
	for range s.c.perResponse {
		s.c.sent++
		id := fmt.Sprint(s.c.sent)
		resp.ReceivedMessages = append(resp.ReceivedMessages, &pubsubpb.ReceivedMessage{AckId: "ack-" + id, Message: &pubsubpb.PubsubMessage{MessageId: id}})
	}
	return resp, nil
}

func (s *stubStream) CloseSend() error         { return nil }
func (s *stubStream) Context() context.Context { return s.ctx }

// TestSeedTrackingCoversBufferedMessages is the first reproduction:
// messages buffered behind a slow stage are tracked for lease extension
// from receipt. With a one-worker stage stuck on its first message and a
// budget of 50, every one of the 50 messages the client holds has its
// receipt modack sent and its lease extended, not only the one the slow
// stage asked for.
func TestSeedTrackingCoversBufferedMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &stubClient{perResponse: 10, modacked: map[string]bool{}}
		ext, err := flow.NewExtender(client, flow.ExtenderConfig{StreamAckDeadline: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer ext.Close()
		src, err := source.Subscribe(client, source.Config{Subscription: seedSub, StreamAckDeadline: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		stuck := operators.ParallelMap(1, func(ctx context.Context, m *source.Message) (*source.Message, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return m, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, src).Via(flow.EagerTrack(ext, 0), flow.FlowGate(flow.NewFlowControl(50, flow.Unlimited)), stuck).To(sink.Acknowledge(sink.Policy{}))
		}()
		time.Sleep(30 * time.Second) // three stream deadlines
		synctest.Wait()
		_, sent, modacked := client.snapshot()
		if sent != 50 || ext.Stats().Leases != 50 || modacked != 50 {
			t.Fatalf("the stub sent %d, %d are leased, %d had a modack; want all 50 the client holds", sent, ext.Stats().Leases, modacked)
		}
		if st := ext.Stats(); st.Extended == 0 || st.Expired != 0 {
			t.Fatalf("extender %+v: want leases extended and none expired", st)
		}
		close(release)
		cancel()
		<-done
		_ = src.Close(context.Background())
	})
}

// TestSeedKeepalivesCarryNoInitialOnlyField is the second reproduction:
// only a stream's first request carries subscription, client id, flow
// control limits and protocol version; every heartbeat is built from the
// zero value.
func TestSeedKeepalivesCarryNoInitialOnlyField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &stubClient{modacked: map[string]bool{}}
		src, err := source.Subscribe(client, source.Config{Subscription: seedSub, HeartbeatInterval: time.Second, MaxOutstandingMessages: 100, MaxOutstandingBytes: 1 << 20, ClientID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, src).To(sink.Acknowledge(sink.Policy{}))
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		cancel()
		<-done
		_ = src.Close(context.Background())
		reqs, _, _ := client.snapshot()
		if len(reqs) < 5 {
			t.Fatalf("%d requests in 10 s with a 1 s heartbeat", len(reqs))
		}
		first := reqs[0]
		if first.Subscription != seedSub || first.ClientId != "c" || first.MaxOutstandingMessages != 100 || first.MaxOutstandingBytes != 1<<20 || first.ProtocolVersion != 1 {
			t.Fatalf("initial request %v", first)
		}
		for i, r := range reqs[1:] {
			if !proto.Equal(r, &pubsubpb.StreamingPullRequest{}) {
				t.Fatalf("heartbeat %d carries %v, want an empty request", i+1, r)
			}
		}
	})
}

// TestSeedGateBoundsWhatTheServerDelivers is the third reproduction: the
// gate counts on receipt, so with a stub that delivers as fast as the
// client reads and a stage stuck on one message, the gate's count is
// every message the client holds — and the source stops reading at the
// budget, so that is at most the budget (here 20), not the one message
// the stuck stage took.
func TestSeedGateBoundsWhatTheServerDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := &stubClient{perResponse: 5, modacked: map[string]bool{}}
		src, err := source.Subscribe(client, source.Config{Subscription: seedSub})
		if err != nil {
			t.Fatal(err)
		}
		fc := flow.NewFlowControl(20, flow.Unlimited)
		release := make(chan struct{})
		stuck := operators.ParallelMap(1, func(ctx context.Context, m *source.Message) (*source.Message, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return m, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, src).Via(flow.FlowGate(fc), stuck).To(sink.Acknowledge(sink.Policy{}))
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		_, sent, _ := client.snapshot()
		if fc.Outstanding() != int64(sent) || sent != 20 {
			t.Fatalf("the stub delivered %d, the gate counts %d; want both at the budget of 20", sent, fc.Outstanding())
		}
		close(release)
		cancel()
		<-done
		_ = src.Close(context.Background())
	})
}
