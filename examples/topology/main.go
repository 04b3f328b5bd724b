// Command topology composes its own stages between a Subscriber's two
// ends, with go-streams: a filter drops the pings, the rest is split into
// two branches by a message attribute, each branch processes its messages
// its own way (the events in one-second windows), and the branches merge
// back into the one Acknowledge sink.
//
//	sub.Source() ─▶ pubsubflow.Filter(kind != "ping", Ack)
//	             ─▶ go-streams Split(kind == "order")
//	                  ├─▶ orders: our ParallelMap(4), parses and totals amounts
//	                  └─▶ events: a go-streams TumblingWindow(1s), counted a window at a time, flattened
//	             ─▶ go-streams Merge ─▶ sub.Acknowledge()
//
// The source leases and counts every message on receipt, so whatever the
// branches buffer is covered. A ping is acked by the filter as it drops
// it (processed, not wanted); a bad order is nacked by its branch (the
// Acknowledge sink leaves a settled message alone); a message the graph
// held past its Hold would be nacked, not lost; every other message is
// acked. The README's go-streams example is the run method, verbatim.
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

// Totals is what the filter and the two branches computed.
type Totals struct {
	Pings      int64 // dropped by the filter, acked
	Orders     int64 // valid orders
	BadOrders  int64 // nacked: amount not a number
	OrderCents int64
	Events     map[string]int64 // by kind
	Windows    int64            // event windows counted
}

// runEmbedded publishes n messages — every third an order, one order in
// a hundred malformed, of the rest every fifth a ping, the others events
// of two kinds — and processes them
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
	go func() { done <- t.run(pipeline.From(sub.Source()), sub.Acknowledge()) }()

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
	fmt.Fprintf(w, "pings: %d dropped (acked); orders: %d valid totalling %d.%02d, %d malformed (nacked); events: %v in %d windows\n",
		tot.Pings, tot.Orders, tot.OrderCents/100, tot.OrderCents%100, tot.BadOrders, tot.Events, tot.Windows)
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

// topology holds the filter's and the branches' state.
type topology struct {
	pings, orders, cents, windows atomic.Int64
	mu                            sync.Mutex
	badIDs                        map[string]bool
	events                        map[string]int64
}

// run is the topology between the subscriber's two ends, in and ack:
// the README's go-streams example, verbatim, and what TestTopologyProperties
// checks.
//
// The filter comes before the graph, not as a go-streams Filter inside it:
// pubsubflow.Filter settles a ping the moment it drops it, with the
// outcome it is given. A go-streams Filter would hold each drop until Hold
// and settle it with Lost, and Lost must stay Nack here for the window's
// sake (an ack would lose an event a stuck window had not counted), so
// every ping would come back each Hold, for ever.
//
// Hold is ten windows: an event leaves its window within a second of
// going in, so a message still inside after 10 s is stuck, and Nack
// redelivers it (never lost) instead of letting it hold its flow permit
// and lease for the default minute.
func (t *topology) run(in pipeline.Pipeline[*pubsubflow.Message], ack stage.Sink[*pubsubflow.Message]) error {
	noPings := pubsubflow.Filter(t.keep, pubsubflow.Ack) // t.keep refuses pings: each is acked as it is dropped
	graph := pubsubflow.Streams(func(g *stage.Group, in streams.Source) streams.Outlet {
		br := gsflow.Split(in, func(m *pubsubflow.Message) bool { return m.Attributes["kind"] == "order" })
		orders := br[0].Via(pipeline.NewStreamsFlow(g, operators.ParallelMap(4, t.order)))
		events := br[1].Via(gsflow.NewTumblingWindow[*pubsubflow.Message](time.Second)).
			Via(gsflow.NewMap(t.window, 1)).            // func([]*pubsubflow.Message) []*pubsubflow.Message
			Via(gsflow.Flatten[*pubsubflow.Message](1)) // Streams' outlet must emit *pubsubflow.Message
		return gsflow.Merge(orders, events)
	}, pubsubflow.StreamsOptions{Hold: 10 * time.Second, Lost: pubsubflow.Nack}) // held past Hold: nacked, never lost
	return in.Via(noPings, graph).To(ack)
}

// keep is the filter: false for a ping, counted.
func (t *topology) keep(m *pubsubflow.Message) bool {
	if m.Attributes["kind"] == "ping" {
		t.pings.Add(1)
		return false
	}
	return true
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

// window is the events branch: it counts one window's events by kind
// and passes them on, to be acked.
func (t *topology) window(ms []*pubsubflow.Message) []*pubsubflow.Message {
	t.windows.Add(1)
	t.mu.Lock()
	for _, m := range ms {
		t.events[m.Attributes["kind"]]++
	}
	t.mu.Unlock()
	return ms
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
	return Totals{Pings: t.pings.Load(), Orders: t.orders.Load(), BadOrders: int64(len(t.badIDs)),
		OrderCents: t.cents.Load(), Events: ev, Windows: t.windows.Load()}
}

// sample is the i-th message the demo publishes: every third an order,
// one order in a hundred malformed; of the rest, every fifth a ping, the
// others views and clicks.
func sample(i int) *pubsubpb.PubsubMessage {
	m := &pubsubpb.PubsubMessage{Data: []byte(strconv.Itoa(i)), Attributes: map[string]string{"kind": "click"}}
	switch {
	case i%300 == 0:
		m.Attributes["kind"], m.Data = "order", []byte("not a number")
	case i%3 == 0:
		m.Attributes["kind"] = "order"
	case i%5 == 0:
		m.Attributes["kind"] = "ping"
	case i%2 == 0:
		m.Attributes["kind"] = "view"
	}
	return m
}
