package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/lease"
	"github.com/pubsubflow/pubsubflow/message"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/source"
)

// Options configure Run.
type Options struct {
	Conn         grpc.ClientConnInterface // owned by the caller
	Subscription string                   // input, "projects/P/subscriptions/S"
	Topic        string                   // output, "projects/P/topics/T"
	// Count stops the relay once this many distinct inputs were relayed
	// and acked; 0 runs until ctx is done.
	Count int
	// Publisher configures the output publisher (zero: defaults).
	Publisher publisher.Config
}

// Run relays Options.Subscription to Options.Topic:
//
//	source.Subscribe → bind → flow.EagerTrack → flow.FlowGate → publisher.Forward(transform)
//
// Every input is leased and counted against the flow budget on receipt;
// Forward acks it only once its output was published and nacks it when
// the publish failed. Run returns nil after Count inputs were relayed, or
// ctx's error.
//
// The settle path here (bind, settler) is a stop-gap until the Subscriber
// resource and the batching acknowledger land: it acks or nacks by one
// unary RPC per message, then releases the lease and the permit.
func Run(ctx context.Context, w io.Writer, opt Options) error {
	client := pubsubpb.NewSubscriberClient(opt.Conn)
	src, err := source.Subscribe(client, source.Config{Subscription: opt.Subscription})
	if err != nil {
		return err
	}
	ext, err := lease.NewExtender(client, opt.Subscription, lease.Config{})
	if err != nil {
		return err
	}
	defer ext.Close()
	pub, err := publisher.New(opt.Conn, opt.Topic, opt.Publisher)
	if err != nil {
		return err
	}
	defer pub.Close()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	fc := flow.NewFlowControl(1000, 100<<20)
	st := newSettler(client, opt.Subscription, ext, fc, opt.Count, stop)
	bind := pipeline.Filter(func(m *message.Message) bool { m.Bind(st); return true }, nil)
	err = pipeline.FromContext(runCtx, src).
		Via(bind, flow.EagerTrack(ext, 0), flow.FlowGate(fc)).
		To(publisher.Forward(pub, transform, 500))
	if st.reachedCount() {
		err = nil // we stopped it
	}
	if cerr := pub.Close(); err == nil {
		err = cerr
	}
	// Whatever is still leased was not relayed: let the server redeliver it.
	for _, m := range ext.Leased() {
		m.Nack()
	}
	acked, nacked := st.counts()
	fmt.Fprintf(w, "relayed %d messages (%d acks, %d nacks); publisher: %+v\n", acked, acked, nacked, pub.Stats())
	return errors.Join(err, st.err())
}

// transform is the relay's processing: upper-case the payload and record
// where it came from.
func transform(m *message.Message) *publisher.Message {
	attrs := map[string]string{"source-id": m.ID}
	for k, v := range m.Attributes {
		attrs[k] = v
	}
	return &publisher.Message{Data: bytes.ToUpper(m.Data), Attributes: attrs}
}

// settler is the relay's one settle path: it acks or nacks by unary RPC,
// one message at a time (a stand-in for the batching acknowledger), then
// releases the message's lease and flow permit, whatever the outcome, and
// counts distinct acked inputs.
type settler struct {
	client pubsubpb.SubscriberClient
	sub    string
	ext    *lease.Extender
	fc     *flow.FlowControl
	count  int
	stop   func()

	mu     sync.Mutex
	acked  map[string]bool
	nacked int
	errs   []error
}

func newSettler(client pubsubpb.SubscriberClient, sub string, ext *lease.Extender, fc *flow.FlowControl, count int, stop func()) *settler {
	return &settler{client: client, sub: sub, ext: ext, fc: fc, count: count, stop: stop, acked: map[string]bool{}}
}

// Settle implements message.Settler.
func (s *settler) Settle(m *message.Message, o message.Outcome, delay time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch o {
	case message.Ack:
		_, err = s.client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: s.sub, AckIds: []string{m.AckID}})
	case message.Nack, message.NackAfter:
		secs := int32(min(delay, 600*time.Second) / time.Second)
		_, err = s.client.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: s.sub, AckIds: []string{m.AckID}, AckDeadlineSeconds: secs})
	}
	// Released after the RPC returned, so the lease covers a slow ack.
	s.ext.Release(m, o)
	s.fc.ReleaseMessage(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("relay: %v %s: %w", o, m.ID, err))
		return
	}
	switch o {
	case message.Ack:
		s.acked[m.ID] = true
		if s.count > 0 && len(s.acked) == s.count {
			s.stop()
		}
	case message.Nack, message.NackAfter:
		s.nacked++
	}
}

func (s *settler) reachedCount() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count > 0 && len(s.acked) >= s.count
}

func (s *settler) counts() (acked, nacked int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked), s.nacked
}

func (s *settler) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}
