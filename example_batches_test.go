package pubsubflow_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pubsubflow/pubsubflow"
)

// RunBatches: four workers each write a batch of up to 100 messages at a
// time (one insert of 100 rows, not 100 inserts). Returning nil acks the
// batch's messages, an error nacks them; a bad row is nacked on its own.
func ExampleSubscriber_RunBatches() {
	srv, subscription := embedded(250)
	defer srv.Close()

	sub, err := pubsubflow.NewSubscriber(context.Background(), subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn()})
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	var mu sync.Mutex
	table := map[string]string{} // stands in for a database table keyed by message id
	largest, bad := 0, 0
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for srv.SubscriptionStats(subscription).Acked < 250 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	err = sub.RunBatches(ctx, 4, pubsubflow.BatchOptions{Size: 100, Wait: 100 * time.Millisecond},
		func(ctx context.Context, ms []*pubsubflow.Message) error {
			mu.Lock()
			defer mu.Unlock()
			largest = max(largest, len(ms))
			for _, m := range ms {
				if string(m.Data) == "order 7" && bad == 0 {
					bad++
					m.Nack() // a bad row (once, here): only it comes back
					continue
				}
				table[m.ID] = string(m.Data) // an upsert: a redelivery changes nothing
			}
			return nil // commit succeeded: ack the rest
		})
	fmt.Println("run:", err, "rows:", len(table), "largest batch ≤ 100:", largest <= 100,
		"redelivered:", srv.SubscriptionStats(subscription).Redelivered)
	// Output: run: <nil> rows: 250 largest batch ≤ 100: true redelivered: 1
}
