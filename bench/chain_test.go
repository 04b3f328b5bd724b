package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/ack"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/lease"
	"github.com/pubsubflow/pubsubflow/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/stage"
)

// nopClient answers Acknowledge and ModifyAckDeadline at once, without
// gRPC: the stage chain alone is measured.
type nopClient struct{ pubsubpb.SubscriberClient }

func (nopClient) Acknowledge(context.Context, *pubsubpb.AcknowledgeRequest, ...grpc.CallOption) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (nopClient) ModifyAckDeadline(context.Context, *pubsubpb.ModifyAckDeadlineRequest, ...grpc.CallOption) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

// BenchmarkStageChain pushes b.N pre-built messages through the stages
// of a subscriber, without gRPC or a server, with the real lease extender,
// flow control, acknowledger and settle path (their RPCs answered at once).
// It isolates the per-message cost of the stages and their hand-offs from
// the transport's, so a change to a stage shows above the noise of the
// end-to-end benchmarks. The source binds and leases each message before
// handing it on, as the Subscriber's stream does (source.Config.OnReceive).
//
//	go test -run '^$' -bench StageChain -benchtime 300000x -count 6 ./bench/
//	benchstat -col /shape out.txt
//
// Shapes:
//
//   - shape=current is the Subscriber's composition: source → EagerTrack
//     → FlowGate → hand-off goroutine (drain check, hand-off mark) → 8
//     workers acking → Acknowledge sink: 5 hand-offs per message.
//   - shape=hooks is the proposed one: the hand-off decision made on the
//     gate's goroutine (Gate.HandOff), the hand-off goroutine only
//     forwarding, and workers keeping the messages they settled
//     (operators.Options.Emit): 4 hand-offs per message.
func BenchmarkStageChain(b *testing.B) {
	for _, shape := range []string{"current", "hooks"} {
		b.Run("shape="+shape, func(b *testing.B) { benchChain(b, shape == "hooks") })
	}
}

// chainParts are a subscriber's long-lived parts over nopClient, and b.N
// messages ready to go through them.
type chainParts struct {
	ext     *lease.Extender
	fc      *flow.FlowControl
	settler *sink.Settler
	msgs    []*message.Message
}

// newChainParts makes the parts; the benchmark's cleanup closes them.
func newChainParts(b *testing.B) *chainParts {
	const sub = "projects/p/subscriptions/sub"
	client := nopClient{}
	ext, err := lease.NewExtender(client, sub, lease.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ext.Close() })
	fc := flow.NewFlowControl(1000, 100<<20)
	acks, err := ack.New(client, sub, ack.Config{Flow: fc})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = acks.Close(context.Background()) })
	now := time.Now()
	msgs := make([]*message.Message, b.N)
	for i := range msgs {
		m := &message.Message{ID: strconv.Itoa(i), AckID: "ack-" + strconv.Itoa(i), Subscription: sub, ReceiveTime: now, Data: make([]byte, 64)}
		m.SetSize(100)
		msgs[i] = m
	}
	return &chainParts{ext: ext, fc: fc, settler: sink.NewSettler(acks, fc, ext), msgs: msgs}
}

func benchChain(b *testing.B, hooks bool) {
	cp := newChainParts(b)
	ext, fc, settler, msgs := cp.ext, cp.fc, cp.settler, cp.msgs
	handOne := func(m *message.Message) bool {
		m.MarkHandedOff()
		return !m.Settled()
	}
	opt := operators.Options[*message.Message, *message.Message]{}
	if hooks {
		opt.Emit = func(m *message.Message) bool { return !m.Settled() }
	}
	work := operators.ParallelMap(ourParallelism, func(_ context.Context, m *message.Message) (*message.Message, error) {
		sink.Apply(m, nil, sink.Policy{})
		return m, nil
	}, opt)
	src := stage.SourceFunc[*message.Message](func(g *stage.Group) <-chan *message.Message {
		out := make(chan *message.Message)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for _, m := range msgs {
				m.Bind(settler) // what the Subscriber's stream does on decode
				ext.Track(m)
				select {
				case out <- m:
				case <-ctx.Done():
					return nil
				}
			}
			return nil
		})
		return out
	})
	p := pipeline.From(src)
	if hooks {
		relay := pipeline.Filter(func(*message.Message) bool { return true }, nil)
		p = p.Via(flow.EagerTrack(ext, 0), &flow.Gate{Flow: fc, HandOff: handOne}, relay, work)
	} else {
		p = p.Via(flow.EagerTrack(ext, 0), flow.FlowGate(fc), pipeline.Filter(handOne, nil), work)
	}
	b.ReportAllocs()
	b.ResetTimer()
	m := StartMeter(0)
	err := p.To(sink.Acknowledge(sink.Policy{}))
	r := m.Stop()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(r.CPU.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}
