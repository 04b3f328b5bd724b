// Command ordering publishes messages with ordering keys and consumes them
// from a subscription with message ordering: the Subscriber's Run then
// processes the messages of one key one at a time, in publish order, while
// different keys proceed in parallel on its workers.
//
// The embedded server, like the strictest reading of the service, has at
// most one message per key outstanding, so each key advances one message
// per ack round trip (an ack goes out at once when none is in flight).
//
// By default it runs on an embedded Pub/Sub server:
//
//	go run ./examples/ordering -keys 5 -per-key 40
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func main() {
	keys := flag.Int("keys", 5, "ordering keys")
	perKey := flag.Int("per-key", 40, "messages per key")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := runEmbedded(ctx, os.Stdout, *keys, *perKey); err != nil {
		log.Fatal(err)
	}
}

// Result is what the consumer saw.
type Result struct {
	// Order is, per key, the sequence numbers in the order they were
	// processed.
	Order map[string][]int
	// MaxConcurrent is the most messages processed at once (over all
	// keys); MaxPerKey the most of one key at once (1 when ordered).
	MaxConcurrent, MaxPerKey int64
}

// runEmbedded publishes perKey messages on each of keys ordering keys,
// interleaved, and consumes them with 8 workers.
func runEmbedded(ctx context.Context, w io.Writer, keys, perKey int) (Result, error) {
	srv, err := pubsubtest.NewServer()
	if err != nil {
		return Result{}, err
	}
	defer srv.Close()
	topic, err := srv.CreateTopic(ctx, "account-events")
	if err != nil {
		return Result{}, err
	}
	subName, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{
		Name: "account-events-ordered", Topic: topic, EnableMessageOrdering: true,
	})
	if err != nil {
		return Result{}, err
	}
	if err := publishInterleaved(ctx, srv, topic, keys, perKey); err != nil {
		return Result{}, err
	}
	res, err := consume(ctx, srv, subName, keys*perKey)
	if err != nil {
		return Result{}, err
	}
	printResult(w, res)
	return res, nil
}

// publishInterleaved publishes message i of every key before message i+1
// of any, so that the keys' messages are mixed in the subscription and
// only ordering keeps each key's sequence. It returns once the server
// has every message.
func publishInterleaved(ctx context.Context, srv *pubsubtest.Server, topic string, keys, perKey int) error {
	// Publishing with ordering keys needs EnableOrdering; the publisher
	// sends each key's messages in Publish order.
	pub, err := publisher.New(srv.ClientConn(), topic, publisher.Config{EnableOrdering: true})
	if err != nil {
		return err
	}
	var results []*publisher.Result
	for i := range perKey {
		for k := range keys {
			results = append(results, pub.Publish(ctx, &publisher.Message{
				Data:        []byte(strconv.Itoa(i)),
				OrderingKey: "account-" + strconv.Itoa(k),
			}))
		}
	}
	for _, r := range results {
		if _, err := r.Get(ctx); err != nil {
			_ = pub.Close()
			return err
		}
	}
	return pub.Close()
}

// consume runs a Subscriber on subName with 8 workers until want messages
// were handled, and returns what the handler saw.
func consume(ctx context.Context, srv *pubsubtest.Server, subName string, want int) (Result, error) {
	sub, err := pubsubflow.NewSubscriber(ctx, subName, pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		return Result{}, err
	}
	defer sub.Close()
	c := &collector{order: map[string][]int{}, active: map[string]int64{}, want: want}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.done = cancel // the last message ends Run
	if err := sub.Run(runCtx, 8, c.handle); err != nil {
		return Result{}, err
	}
	return c.result(), nil
}

// printResult prints how many messages each key got, whether each came in
// order, and the most that ran at once.
func printResult(w io.Writer, res Result) {
	var b strings.Builder
	for k, seq := range res.Order {
		fmt.Fprintf(&b, " %s:%d", k, len(seq))
	}
	fmt.Fprintf(w, "processed per key:%s; in order: %v; at most %d at once, %d per key\n",
		b.String(), inOrder(res.Order), res.MaxConcurrent, res.MaxPerKey)
}

// collector is the handler: it records the order of each key and how many
// messages run at once, overall and per key.
type collector struct {
	want int
	done func()
	n    atomic.Int64

	mu            sync.Mutex
	order         map[string][]int
	active        map[string]int64
	running       int64
	maxConcurrent int64
	maxPerKey     int64
}

func (c *collector) handle(ctx context.Context, m *pubsubflow.Message) error {
	seq, err := strconv.Atoi(string(m.Data))
	if err != nil {
		return err // nack
	}
	c.mu.Lock()
	c.running++
	c.active[m.OrderingKey]++
	c.maxConcurrent = max(c.maxConcurrent, c.running)
	c.maxPerKey = max(c.maxPerKey, c.active[m.OrderingKey])
	c.order[m.OrderingKey] = append(c.order[m.OrderingKey], seq)
	c.mu.Unlock()

	time.Sleep(time.Millisecond) // the work, long enough for keys to overlap

	c.mu.Lock()
	c.running--
	c.active[m.OrderingKey]--
	c.mu.Unlock()
	if c.n.Add(1) == int64(c.want) {
		c.done()
	}
	return nil // ack
}

func (c *collector) result() Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Result{Order: c.order, MaxConcurrent: c.maxConcurrent, MaxPerKey: c.maxPerKey}
}

// inOrder reports whether every key's sequence is 0, 1, 2, ….
func inOrder(order map[string][]int) bool {
	for _, seq := range order {
		for i, s := range seq {
			if s != i {
				return false
			}
		}
	}
	return true
}
