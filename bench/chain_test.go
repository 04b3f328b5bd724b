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
// end-to-end benchmarks.
//
//   - shape=current is the Subscriber's composition today: bind filter →
//     EagerTrack → FlowGate → hand-off goroutine → 8 workers acking →
//     Acknowledge sink (6 hand-offs per message).
//   - shape=hooks is the proposed one: EagerTrack binding on receipt
//     (Tracker.OnReceive) → FlowGate marking the hand-off (Gate.HandOff)
//     → hand-off goroutine → 8 workers that keep settled messages
//     (Options.Emit) (4 hand-offs per message).
//
//	go test -run '^$' -bench StageChain -count 10 ./bench/
func BenchmarkStageChain(b *testing.B) {
	for _, shape := range []string{"current", "hooks"} {
		b.Run("shape="+shape, func(b *testing.B) { benchChain(b, shape == "hooks") })
	}
}

func benchChain(b *testing.B, hooks bool) {
	const sub = "projects/p/subscriptions/s"
	client := nopClient{}
	ext, err := lease.NewExtender(client, sub, lease.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer ext.Close()
	fc := flow.NewFlowControl(1000, 100<<20)
	acks, err := ack.New(client, sub, ack.Config{Flow: fc})
	if err != nil {
		b.Fatal(err)
	}
	defer acks.Close(context.Background())
	settler := sink.NewSettler(acks, fc, ext)
	now := time.Now()
	msgs := make([]*message.Message, b.N)
	for i := range msgs {
		m := &message.Message{ID: strconv.Itoa(i), AckID: "ack-" + strconv.Itoa(i), Subscription: sub, ReceiveTime: now, Data: make([]byte, 64)}
		m.SetSize(100)
		msgs[i] = m
	}
	bindOne := func(m *message.Message) { m.Bind(settler) }
	handOne := func(m *message.Message) bool {
		m.MarkHandedOff()
		return !m.Settled()
	}
	relay := pipeline.Filter(func(*message.Message) bool { return true }, nil)
	opt := operators.Options[*message.Message, *message.Message]{}
	if hooks {
		opt.Emit = func(m *message.Message) bool { return !m.Settled() }
	}
	work := operators.ParallelMap(ourParallelism, func(_ context.Context, m *message.Message) (*message.Message, error) {
		sink.Apply(m, nil, sink.Policy{})
		return m, nil
	}, opt)
	p := pipeline.From(pipeline.Slice(msgs...))
	if hooks {
		p = p.Via(&flow.Tracker{Extender: ext, OnReceive: bindOne}, &flow.Gate{Flow: fc, HandOff: handOne}, relay, work)
	} else {
		bind := pipeline.Filter(func(m *message.Message) bool { bindOne(m); return true }, nil)
		handOff := pipeline.Filter(handOne, nil)
		p = p.Via(bind, flow.EagerTrack(ext, 0), flow.FlowGate(fc), handOff, work)
	}
	b.ReportAllocs()
	b.ResetTimer()
	m := StartMeter(0)
	err = p.To(sink.Acknowledge(sink.Policy{}))
	r := m.Stop()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(r.CPU.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}
