package ack

import (
	"context"
	"sync"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

// call is one request a stubClient received.
type call struct {
	method  string // "Acknowledge" or "ModifyAckDeadline"
	ids     []string
	seconds int32
	size    int // encoded request size
}

// stubClient records Acknowledge and ModifyAckDeadline requests and answers
// them with reply (nil: success). Other methods are not implemented.
type stubClient struct {
	pubsubpb.SubscriberClient
	reply func(ctx context.Context, c call) error

	mu    sync.Mutex
	calls []call
}

func (s *stubClient) record(ctx context.Context, c call) error {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	reply := s.reply
	s.mu.Unlock()
	if reply != nil {
		return reply(ctx, c)
	}
	return nil
}

func (s *stubClient) Acknowledge(ctx context.Context, req *pubsubpb.AcknowledgeRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	c := call{method: "Acknowledge", ids: append([]string(nil), req.AckIds...), size: proto.Size(req)}
	return &emptypb.Empty{}, s.record(ctx, c)
}

func (s *stubClient) ModifyAckDeadline(ctx context.Context, req *pubsubpb.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	c := call{method: "ModifyAckDeadline", ids: append([]string(nil), req.AckIds...), seconds: req.AckDeadlineSeconds, size: proto.Size(req)}
	return &emptypb.Empty{}, s.record(ctx, c)
}

func (s *stubClient) snapshot() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// idsSent counts the ack ids of every recorded call of method.
func (s *stubClient) idsSent(method string) int {
	n := 0
	for _, c := range s.snapshot() {
		if c.method == method {
			n += len(c.ids)
		}
	}
	return n
}

// recorder collects events.
type recorder struct {
	mu  sync.Mutex
	evs []event.Event
}

func (r *recorder) fn(e event.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) count(k event.Kind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.evs {
		if e.Kind == k {
			n += e.Count
		}
	}
	return n
}

func (r *recorder) first(k event.Kind) (event.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.evs {
		if e.Kind == k {
			return e, true
		}
	}
	return event.Event{}, false
}
