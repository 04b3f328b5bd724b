package publisher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// benchMessages is how many messages each publisher publishes per
// benchmark iteration.
const benchMessages = 20_000

// BenchmarkSideBySide publishes benchMessages 100-byte messages with this
// Publisher and with Google's official publisher (cloud.google.com/go/
// pubsub/v2), alternately, against the same pubsubtest server over loopback
// TCP, both with their default batching (100 messages, 1 MB, 10 ms). It
// reports each rate and ours/google; "serial" publishes from one goroutine,
// "parallel" from 8.
func BenchmarkSideBySide(b *testing.B) {
	for _, workers := range []int{1, 8} {
		name := "serial"
		if workers > 1 {
			name = fmt.Sprintf("parallel%d", workers)
		}
		b.Run(name, func(b *testing.B) { benchSideBySide(b, workers) })
	}
}

func benchSideBySide(b *testing.B, workers int) {
	srv, topic := benchServer(b)
	ctx := context.Background()

	ours, err := New(srv.ClientConn(), topic, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer ours.Close()

	conn, err := srv.Dial(ctx) // Google's client closes its connection
	if err != nil {
		b.Fatal(err)
	}
	client, err := pubsub.NewClient(ctx, srv.Project(), option.WithGRPCConn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	theirs := client.Publisher("bench")
	defer theirs.Stop()

	data := make([]byte, 100)
	publishOurs := func(n int) error {
		rs := make([]*Result, n)
		for i := range rs {
			rs[i] = ours.Publish(ctx, &Message{Data: data})
		}
		for _, r := range rs {
			if _, err := r.Get(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	publishTheirs := func(n int) error {
		rs := make([]*pubsub.PublishResult, n)
		for i := range rs {
			rs[i] = theirs.Publish(ctx, &pubsub.Message{Data: data})
		}
		for _, r := range rs {
			if _, err := r.Get(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	run := func(publish func(int) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				if err := publish(benchMessages / workers); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// Warm both up (connections, pools) outside the timing.
	run(publishOurs)
	run(publishTheirs)

	var tOurs, tTheirs time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // alternate who goes first
			tOurs += run(publishOurs)
			tTheirs += run(publishTheirs)
		} else {
			tTheirs += run(publishTheirs)
			tOurs += run(publishOurs)
		}
	}
	n := float64(b.N * benchMessages)
	oursRate, theirRate := n/tOurs.Seconds(), n/tTheirs.Seconds()
	b.ReportMetric(oursRate, "ours-msgs/s")
	b.ReportMetric(theirRate, "google-msgs/s")
	b.ReportMetric(oursRate/theirRate, "ours/google")
	b.ReportMetric(0, "ns/op")
}

// benchServer is a pubsubtest server with the topic "bench", closed when
// the benchmark ends.
func benchServer(b *testing.B) (*pubsubtest.Server, string) {
	b.Helper()
	srv, err := pubsubtest.NewServer()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	topic, err := srv.CreateTopic(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return srv, topic
}
