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
// of a subscriber, without gRPC or a server: bind → EagerTrack → FlowGate
// → hand-off → 8 workers acking → Acknowledge sink, with the real lease
// extender, flow control, acknowledger and settle path (their RPCs answered
// at once). It isolates the per-message cost of the stages and their
// hand-offs from the transport's, so a change to a stage shows in it
// above the noise of the end-to-end benchmarks.
//
//	go test -run '^$' -bench StageChain -count 10 ./bench/
func BenchmarkStageChain(b *testing.B) {
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
	bind := pipeline.Filter(func(m *message.Message) bool { m.Bind(settler); return true }, nil)
	handOff := pipeline.Filter(func(m *message.Message) bool { return !m.Settled() }, nil)
	work := operators.ParallelMap(ourParallelism, func(_ context.Context, m *message.Message) (*message.Message, error) {
		sink.Apply(m, nil, sink.Policy{})
		return m, nil
	}, operators.Options[*message.Message, *message.Message]{})
	b.ReportAllocs()
	b.ResetTimer()
	m := StartMeter(0)
	err = pipeline.From(pipeline.Slice(msgs...)).
		Via(bind, flow.EagerTrack(ext, 0), flow.FlowGate(fc), handOff, work).
		To(sink.Acknowledge(sink.Policy{}))
	r := m.Stop()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(r.CPU.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}
