package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/ack"
	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/lease"
	"github.com/pubsubflow/pubsubflow/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// runProposed is a prototype of the Subscriber composition proposed in
// BENCHMARKS.md ("Root package: proposed change"), built from the same
// parts as the Subscriber: the stream binds and leases each message on
// decode (source.Config.OnReceive, as the Subscriber does), the hand-off
// decision is made on the gate's goroutine (Gate.HandOff) so the hand-off
// goroutine only forwards, and the workers keep the messages they settled
// (operators.Options.Emit) instead of handing them to the Acknowledge
// sink. It has none of the Subscriber's shutdown bookkeeping or stats, so
// it is a measure of the hand-offs saved, not a replacement.
func runProposed(ctx context.Context, tb testing.TB, e *env, s settings, handled func()) error {
	cc := e.dial(tb)
	defer cc.Close()
	client := pubsubpb.NewSubscriberClient(cc)
	ext, err := lease.NewExtender(client, e.sub, lease.Config{})
	if err != nil {
		return err
	}
	defer ext.Close()
	fc := flow.NewFlowControl(int64(s.outstanding), byteBudget)
	acks, err := ack.New(client, e.sub, ack.Config{Flow: fc})
	if err != nil {
		return err
	}
	defer acks.Close(context.Background())
	settler := sink.NewSettler(acks, fc, ext)
	src, err := source.Subscribe(client, source.Config{
		Subscription:           e.sub,
		MaxOutstandingMessages: int64(s.outstanding),
		MaxOutstandingBytes:    byteBudget,
		Streams:                s.streams,
		OnReceive: func(m *message.Message) {
			m.Bind(settler)
			ext.Track(m)
		},
	})
	if err != nil {
		return err
	}
	var handedOff atomic.Int64
	track := flow.EagerTrack(ext, 0)
	gate := &flow.Gate{Flow: fc, HandOff: func(m *message.Message) bool {
		if m.MarkHandedOff() {
			handedOff.Add(1)
		}
		return true
	}}
	relay := stage.FlowFunc[*message.Message, *message.Message](func(g *stage.Group, in <-chan *message.Message) <-chan *message.Message {
		out := make(chan *message.Message)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for m := range in {
				select {
				case out <- m:
				case <-ctx.Done():
				}
			}
			return nil
		})
		return out
	})
	handle := operators.ParallelMap(ourParallelism, func(ctx context.Context, m *message.Message) (*message.Message, error) {
		handled()
		sink.Apply(m, nil, sink.Policy{})
		return m, nil
	}, operators.Options[*message.Message, *message.Message]{Emit: func(m *message.Message) bool { return !m.Settled() }})
	err = pipeline.FromContext(ctx, src).Via(track, gate, relay, handle).To(sink.Acknowledge(sink.Policy{}))
	for _, m := range ext.Leased() {
		m.Nack()
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// BenchmarkProposedComposition compares our Subscriber with the prototype
// of the proposed composition (runProposed), same settings, same run.
//
//	go test -run '^$' -bench ProposedComposition -benchtime 200000x -count 6 ./bench/
func BenchmarkProposedComposition(b *testing.B) {
	for _, outstanding := range []int{1000, 10000} {
		for _, c := range []client{{"ours", runOurs}, {"proposed", runProposed}} {
			b.Run(fmt.Sprintf("payload=64B/outstanding=%d/client=%s", outstanding, c.name), func(b *testing.B) {
				benchThroughput(b, c, 64, settings{outstanding: outstanding, streams: 1})
			})
		}
	}
}
