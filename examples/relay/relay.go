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

	"github.com/pubsubflow/pubsubflow/message"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
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
//	subscribe → bind on receipt → publisher.Forward(transform)
//
// where Forward acks each input only once its output was published and
// nacks it when the publish failed. It returns nil after Count inputs were
// relayed, or ctx's error.
//
// The receiving side is a stop-gap until the Subscriber resource lands: a
// source.Subscribe stream, an eager stage that binds each message to a
// settler on receipt, and a settler that acks or nacks by unary RPC. It
// does not extend leases (the input deadline, 60 s, outlasts a relay) nor
// flow-control beyond the server's limits and the Forward window.
func Run(ctx context.Context, w io.Writer, opt Options) error {
	pub, err := publisher.New(opt.Conn, opt.Topic, opt.Publisher)
	if err != nil {
		return err
	}
	defer pub.Close()
	src, err := source.Subscribe(pubsubpb.NewSubscriberClient(opt.Conn), source.Config{Subscription: opt.Subscription})
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	st := newSettler(pubsubpb.NewSubscriberClient(opt.Conn), opt.Subscription, opt.Count, stop)
	bind := &stage.Eager[*message.Message]{
		Bound:     1000,
		OnReceive: func(_ context.Context, m *message.Message) error { m.Bind(st); return nil },
		OnDrop:    func(m *message.Message) { m.Nack() },
	}
	err = pipeline.FromContext(runCtx, src).Via(bind).To(publisher.Forward(pub, transform, 500))
	if st.reachedCount() {
		err = nil // we stopped it
	}
	if cerr := pub.Close(); err == nil {
		err = cerr
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
	return &publisher.Message{Data: bytes.ToUpper(m.Data), Attributes: attrs, OrderingKey: ""}
}

// settler acks and nacks by unary RPC, one message at a time (a stand-in
// for the batching acknowledger), and counts distinct acked inputs.
type settler struct {
	client pubsubpb.SubscriberClient
	sub    string
	count  int
	stop   func()

	mu     sync.Mutex
	acked  map[string]bool
	nacked int
	errs   []error
}

func newSettler(client pubsubpb.SubscriberClient, sub string, count int, stop func()) *settler {
	return &settler{client: client, sub: sub, count: count, stop: stop, acked: map[string]bool{}}
}

// Settle implements message.Settler.
func (s *settler) Settle(m *message.Message, o message.Outcome, _ time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch o {
	case message.Ack:
		_, err = s.client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: s.sub, AckIds: []string{m.AckID}})
	case message.Nack:
		_, err = s.client.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: s.sub, AckIds: []string{m.AckID}})
	}
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
	case message.Nack:
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
