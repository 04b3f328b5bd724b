package source

import (
	"context"
	"sync"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// capturingClient is a stub SubscriberClient whose StreamingPull records
// every request sent and, when answer is set, answers each later request
// with an empty response (as a protocol-version-1 server answers
// heartbeats). Its responses stay open until the stream's context ends.
// Only StreamingPull is implemented.
type capturingClient struct {
	pubsubpb.SubscriberClient // nil: any other method panics
	answer                    bool

	mu      sync.Mutex
	streams [][]*pubsubpb.StreamingPullRequest
	md      []metadata.MD
}

func (c *capturingClient) StreamingPull(ctx context.Context, _ ...grpc.CallOption) (pubsubpb.Subscriber_StreamingPullClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	md, _ := metadata.FromOutgoingContext(ctx)
	c.md = append(c.md, md)
	c.streams = append(c.streams, nil)
	return &capturingStream{c: c, idx: len(c.streams) - 1, ctx: ctx, answers: make(chan struct{}, 1024)}, nil
}

// requests returns a copy of what stream i was sent.
func (c *capturingClient) requests(i int) []*pubsubpb.StreamingPullRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i >= len(c.streams) {
		return nil
	}
	return append([]*pubsubpb.StreamingPullRequest(nil), c.streams[i]...)
}

type capturingStream struct {
	grpc.ClientStream // nil: unused methods panic
	c                 *capturingClient
	idx               int
	ctx               context.Context
	answers           chan struct{}
	sent              int
}

func (s *capturingStream) Send(req *pubsubpb.StreamingPullRequest) error {
	s.c.mu.Lock()
	s.c.streams[s.idx] = append(s.c.streams[s.idx], req)
	s.c.mu.Unlock()
	s.sent++
	if s.c.answer && s.sent > 1 {
		select {
		case s.answers <- struct{}{}:
		default:
		}
	}
	return nil
}

func (s *capturingStream) Recv() (*pubsubpb.StreamingPullResponse, error) {
	select {
	case <-s.answers:
		return &pubsubpb.StreamingPullResponse{}, nil
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *capturingStream) CloseSend() error         { return nil }
func (s *capturingStream) Context() context.Context { return s.ctx }
