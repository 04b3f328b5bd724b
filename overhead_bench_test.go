package pubsubflow

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// BenchmarkSubscriberOverhead measures what the Subscriber adds per
// message, without a network or a decoder: a stub SubscriberClient hands
// out ready-made responses of 100 messages of 64 B (server-side flow
// control as the server would apply it: at most MaxOutstandingMessages
// unacked) and answers every ack and modack at once. Run(ctx, 8, handler
// that returns nil). cpu-ns/msg is the process's user + system time per
// message: all of it is the Subscriber's (and the Go runtime's for it).
//
//	go test -run '^$' -bench SubscriberOverhead -benchtime 200000x .
func BenchmarkSubscriberOverhead(b *testing.B) {
	benchOverhead(b, func(ctx context.Context, sub *Subscriber, handled func(n int)) error {
		return sub.Run(ctx, 8, func(context.Context, *Message) error {
			handled(1)
			return nil
		})
	})
}

// benchOverhead runs run (a Subscriber's consumer whose handler reports
// each message it got through handled) against the stub server at 1,000
// and 10,000 outstanding, until b.N messages were handled, and reports
// cpu-ns/msg and msgs/s.
func benchOverhead(b *testing.B, run func(ctx context.Context, sub *Subscriber, handled func(n int)) error) {
	for _, outstanding := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("outstanding=%d", outstanding), func(b *testing.B) {
			c := newStubServer(b.N, int64(outstanding))
			sub, err := NewSubscriber(context.Background(), "projects/proj/subscriptions/sub", SubscriberConfig{
				Client:                 c,
				MaxOutstandingMessages: int64(outstanding),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var count atomic.Int64
			all := make(chan struct{})
			// Responses are whole, so the count may pass b.N in one step.
			handled := func(n int) {
				if after := count.Add(int64(n)); after >= int64(b.N) && after-int64(n) < int64(b.N) {
					close(all)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- run(ctx, sub, handled) }()
			<-all
			elapsed, cpu := time.Since(start), processCPU()-cpu0
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stubServer is a SubscriberClient that delivers total messages on its
// streams, at most limit unacked at a time, in responses of perResponse.
type stubServer struct {
	pubsubpb.SubscriberClient // unimplemented methods panic
	total, limit              int64
	data                      []byte
	publish                   *timestamppb.Timestamp

	mu        sync.Mutex
	resps     []*pubsubpb.StreamingPullResponse // made as needed, reused once settled
	unsettled []int                             // per response, its messages not acked or nacked
	free      []int                             // responses with none unsettled
	sent      int64
	out       int64 // delivered, not acked or nacked
	room      chan struct{}
	acks      atomic.Int64
	modacks   atomic.Int64
}

const perResponse = 100

func newStubServer(total int, limit int64) *stubServer {
	return &stubServer{total: int64(total), limit: limit, data: make([]byte, 64), publish: timestamppb.Now(), room: make(chan struct{}, 1)}
}

// next returns a response none of whose ack ids the client may still
// hold (an ack id names one delivery: a real server never sends it twice
// while it is out): a free one, else a new one. Responses are reused, so
// the heap stays small. Called with s.mu held.
func (s *stubServer) next() *pubsubpb.StreamingPullResponse {
	if n := len(s.free); n > 0 {
		r := s.free[n-1]
		s.free = s.free[:n-1]
		s.unsettled[r] = perResponse
		return s.resps[r]
	}
	first := len(s.resps) * perResponse
	resp := &pubsubpb.StreamingPullResponse{ReceivedMessages: make([]*pubsubpb.ReceivedMessage, perResponse)}
	for i := range resp.ReceivedMessages {
		id := strconv.Itoa(first + i)
		resp.ReceivedMessages[i] = &pubsubpb.ReceivedMessage{
			AckId:   "ack-" + id,
			Message: &pubsubpb.PubsubMessage{MessageId: id, Data: s.data, PublishTime: s.publish},
		}
	}
	s.resps = append(s.resps, resp)
	s.unsettled = append(s.unsettled, perResponse)
	return resp
}

func (s *stubServer) GetSubscription(context.Context, *pubsubpb.GetSubscriptionRequest, ...grpc.CallOption) (*pubsubpb.Subscription, error) {
	return &pubsubpb.Subscription{}, nil
}

func (s *stubServer) Acknowledge(_ context.Context, r *pubsubpb.AcknowledgeRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	s.acks.Add(int64(len(r.AckIds)))
	s.release(r.AckIds)
	return &emptypb.Empty{}, nil
}

func (s *stubServer) ModifyAckDeadline(_ context.Context, r *pubsubpb.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	s.modacks.Add(int64(len(r.AckIds)))
	if r.AckDeadlineSeconds == 0 {
		s.release(r.AckIds)
	}
	return &emptypb.Empty{}, nil
}

// release ends the delivery of ackIDs ("ack-N": message N, of response
// N/perResponse).
func (s *stubServer) release(ackIDs []string) {
	s.mu.Lock()
	s.out -= int64(len(ackIDs))
	for _, id := range ackIDs {
		n, _ := strconv.Atoi(strings.TrimPrefix(id, "ack-"))
		r := n / perResponse
		if s.unsettled[r]--; s.unsettled[r] == 0 {
			s.free = append(s.free, r)
		}
	}
	s.mu.Unlock()
	select {
	case s.room <- struct{}{}:
	default:
	}
}

func (s *stubServer) StreamingPull(ctx context.Context, _ ...grpc.CallOption) (pubsubpb.Subscriber_StreamingPullClient, error) {
	return &stubStream{s: s, ctx: ctx}, nil
}

type stubStream struct {
	grpc.ClientStream
	s   *stubServer
	ctx context.Context
}

func (st *stubStream) Context() context.Context                  { return st.ctx }
func (st *stubStream) Header() (metadata.MD, error)              { return nil, nil }
func (st *stubStream) CloseSend() error                          { return nil }
func (st *stubStream) Send(*pubsubpb.StreamingPullRequest) error { return st.ctx.Err() }

// Recv hands out the next response once the limit leaves room for it.
func (st *stubStream) Recv() (*pubsubpb.StreamingPullResponse, error) {
	s := st.s
	for {
		s.mu.Lock()
		if s.sent < s.total && s.limit-s.out >= perResponse {
			resp := s.next()
			n := int64(len(resp.ReceivedMessages))
			s.sent += n
			s.out += n
			s.mu.Unlock()
			return resp, nil
		}
		s.mu.Unlock()
		select {
		case <-s.room:
		case <-time.After(10 * time.Millisecond):
		case <-st.ctx.Done():
			return nil, st.ctx.Err()
		}
	}
}
