// Command topology composes its own stages between a Subscriber's two
// ends, with go-streams: the source is split into two branches by a
// message attribute, each branch processes its messages its own way, and
// the branches merge back into the one Acknowledge sink.
//
//	sub.Source() ─▶ go-streams Split(kind == "order")
//	                  ├─▶ orders: our ParallelMap(4), parses and totals amounts
//	                  └─▶ events: a go-streams Map, counts by kind
//	              ─▶ go-streams Merge ─▶ sub.Acknowledge()
//
// The source leases and counts every message on receipt, so whatever the
// branches buffer is covered; a message a branch drops would be nacked,
// not lost. A bad order is nacked by its branch (the Acknowledge sink
// leaves a settled message alone); every other message is acked.
//
// By default it runs on an embedded Pub/Sub server:
//
//	go run ./examples/topology -n 1000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

func main() {
	n := flag.Int("n", 1000, "messages to publish and process")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := runEmbedded(ctx, os.Stdout, *n); err != nil {
		log.Fatal(err)
	}
}

// Totals is what the two branches computed.
type Totals struct {
	Orders     int64 // valid orders
	BadOrders  int64 // nacked: amount not a number
	OrderCents int64
	Events     map[string]int64 // by kind
}

// runEmbedded publishes n messages — every third an order, one order in
// a hundred malformed, the rest events of two kinds — and processes them
// until each was acked or nacked once.
func runEmbedded(ctx context.Context, w io.Writer, n int) (Totals, error) {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		return Totals{}, err
	}
	defer srv.Close()
	topic, err := srv.CreateTopic(ctx, "activity")
	if err != nil {
		return Totals{}, err
	}
	subName, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "activity-topology", Topic: topic})
	if err != nil {
		return Totals{}, err
	}
	var msgs []*pubsubpb.PubsubMessage
	for i := range n {
		msgs = append(msgs, sample(i))
	}
	for len(msgs) > 0 { // at most 1000 per request
		k := min(len(msgs), 1000)
		if _, err := srv.Publish(ctx, topic, msgs[:k]...); err != nil {
			return Totals{}, err
		}
		msgs = msgs[k:]
	}

	sub, err := pubsubflow.NewSubscriber(ctx, subName, pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		return Totals{}, err
	}
	t := &topology{events: map[string]int64{}}
	done := make(chan error, 1)
	go func() { done <- pipeline.From(sub.Source()).Via(t.flow()).To(sub.Acknowledge()) }()

	if err := t.waitSettled(ctx, sub, n, done); err != nil {
		_ = sub.Close()
		return Totals{}, err
	}
	closeErr := sub.Close() // drains: the pipeline then ends
	if err := <-done; err != nil {
		return Totals{}, err
	}
	if closeErr != nil {
		return Totals{}, closeErr
	}
	tot := t.totals()
	fmt.Fprintf(w, "orders: %d valid totalling %d.%02d, %d malformed (nacked); events: %v\n",
		tot.Orders, tot.OrderCents/100, tot.OrderCents%100, tot.BadOrders, tot.Events)
	return tot, nil
}

// waitSettled returns once every one of n messages was acked or (the bad
// orders, which come back after each nack) nacked at least once, or when
// ctx is done; or the pipeline's error if it ended first.
func (t *topology) waitSettled(ctx context.Context, sub *pubsubflow.Subscriber, n int, done <-chan error) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st := sub.Stats()
		if st.Acked+min(st.Nacked, t.uniqueBad()) >= uint64(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			if err == nil {
				err = errors.New("the source closed")
			}
			return fmt.Errorf("pipeline ended early: %w", err)
		case <-tick.C:
		}
	}
}

// topology holds the branches' state.
type topology struct {
	orders, cents atomic.Int64
	mu            sync.Mutex
	badIDs        map[string]bool
	events        map[string]int64
}

// flow is the go-streams sub-graph between the subscriber's ends.
func (t *topology) flow() stage.Flow[*pubsubflow.Message, *pubsubflow.Message] {
	return pubsubflow.Streams(func(g *stage.Group, in streams.Source) streams.Outlet {
		branches := gsflow.Split(in, func(m *pubsubflow.Message) bool { return m.Attributes["kind"] == "order" })
		orders := branches[0].Via(pipeline.NewStreamsFlow(g, operators.ParallelMap(4, t.order)))
		events := branches[1].Via(gsflow.NewMap(t.event, 1))
		return gsflow.Merge(orders, events)
	}, pubsubflow.StreamsOptions{})
}

// order is the orders branch: an amount in cents, or a nack.
func (t *topology) order(_ context.Context, m *pubsubflow.Message) (*pubsubflow.Message, error) {
	cents, err := strconv.ParseInt(string(m.Data), 10, 64)
	if err != nil {
		t.mu.Lock()
		if t.badIDs == nil {
			t.badIDs = map[string]bool{}
		}
		t.badIDs[m.ID] = true
		t.mu.Unlock()
		m.Nack() // settled here; the Acknowledge sink leaves it alone
		return m, nil
	}
	t.orders.Add(1)
	t.cents.Add(cents)
	return m, nil // reaching Acknowledge unsettled means ack
}

// event is the events branch.
func (t *topology) event(m *pubsubflow.Message) *pubsubflow.Message {
	t.mu.Lock()
	t.events[m.Attributes["kind"]]++
	t.mu.Unlock()
	return m
}

func (t *topology) uniqueBad() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return uint64(len(t.badIDs))
}

func (t *topology) totals() Totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	ev := make(map[string]int64, len(t.events))
	for k, v := range t.events {
		ev[k] = v
	}
	return Totals{Orders: t.orders.Load(), BadOrders: int64(len(t.badIDs)), OrderCents: t.cents.Load(), Events: ev}
}

// sample is the i-th message the demo publishes: every third an order,
// one order in a hundred malformed, the rest views and clicks.
func sample(i int) *pubsubpb.PubsubMessage {
	m := &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i)), Attributes: map[string]string{"kind": "click"}}
	switch {
	case i%300 == 0:
		m.Attributes["kind"], m.Data = "order", []byte("not a number")
	case i%3 == 0:
		m.Attributes["kind"] = "order"
	case i%2 == 0:
		m.Attributes["kind"] = "view"
	}
	return m
}
