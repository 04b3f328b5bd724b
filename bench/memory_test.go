package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// serverEnv, when set to "BACKLOG:PAYLOAD", makes the test binary serve a
// subscription with that backlog on loopback TCP instead of running tests
// (see serveBacklog).
const serverEnv = "PUBSUBFLOW_BENCH_SERVER"

// Memory benchmark parameters: the backlog waiting on the subscription and
// the payload of each message.
const (
	memBacklog = 1_000_000
	memPayload = 1024
)

// serveBacklog is the child process of BenchmarkMemoryBacklog: a pubsubtest
// server with topic "topic" and subscription "sub" holding the backlog. It prints
// "ADDR <address> <subscription> <project>" once ready, serves until its standard
// input closes, then prints the subscription's counters as
// "STATS <acked> <redelivered> <expired>" and exits. Keeping the server in
// another process keeps its backlog out of the heap being measured.
func serveBacklog() int {
	var backlog, payload int
	if _, err := fmt.Sscanf(os.Getenv(serverEnv), "%d:%d", &backlog, &payload); err != nil {
		fmt.Fprintln(os.Stderr, "bench server:", err)
		return 2
	}
	srv, err := pubsubtest.NewServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench server:", err)
		return 1
	}
	defer srv.Close()
	e := &env{srv: srv}
	ctx := context.Background()
	if e.topic, err = srv.CreateTopic(ctx, "topic"); err == nil {
		e.sub, err = srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "sub", Topic: "topic", AckDeadline: 60 * time.Second})
	}
	if err == nil {
		err = e.publishErr(backlog, payload)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench server:", err)
		return 1
	}
	fmt.Printf("ADDR %s %s %s\n", srv.Addr(), e.sub, srv.Project())
	_, _ = io.Copy(io.Discard, os.Stdin)
	st := e.stats()
	fmt.Printf("STATS %d %d %d\n", st.Acked, st.Redelivered, st.Expired)
	return 0
}

// BenchmarkMemoryBacklog consumes b.N messages (at most 1,000,000) of a
// 1,000,000-message backlog of 1 KiB messages with each client's default
// limits and a trivial handler, and reports the client process's peak
// heap. The server runs in a child process (this test binary, re-run), so
// the backlog is not in the measured heap; peak-heap-B covers everything
// else: the client, its gRPC buffers, and garbage not yet collected.
//
//	go test -run '^$' -bench MemoryBacklog -benchtime 1000000x -timeout 30m ./bench/
func BenchmarkMemoryBacklog(b *testing.B) {
	for _, name := range []string{"ours", "google"} {
		b.Run("client="+name, func(b *testing.B) {
			n := min(b.N, memBacklog)
			srv := startChild(b, fmt.Sprintf("%s=%d:%d", serverEnv, memBacklog, memPayload))
			runtime.GC()
			base := HeapBytes()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var handled atomic.Int64
			reached := make(chan struct{})
			count := func() {
				if handled.Add(1) == int64(n) {
					close(reached)
				}
			}
			done := make(chan error, 1)
			b.ResetTimer()
			m := StartMeter(0)
			go func() {
				if name == "ours" {
					done <- memOurs(ctx, b, srv, count)
				} else {
					done <- memGoogle(ctx, b, srv, count)
				}
			}()
			select {
			case <-reached:
			case err := <-done:
				b.Fatalf("%s stopped early: %v", name, err)
			}
			cancel()
			if err := <-done; err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			r := m.Stop()
			b.StopTimer()
			acked, redelivered, expired := srv.stop(b)
			if acked < int64(n) || redelivered != 0 || expired != 0 {
				b.Errorf("%s: server acked %d of %d, redelivered %d, expired %d", name, acked, n, redelivered, expired)
			}
			b.ReportMetric(float64(r.PeakHeap), "peak-heap-B")
			b.ReportMetric(float64(r.PeakRSS), "peak-rss-B")
			b.ReportMetric(float64(base), "base-heap-B")
			b.ReportMetric(float64(n)/r.Elapsed.Seconds(), "msgs/s")
		})
	}
}

// memOurs runs our Subscriber with its default limits (1,000 messages,
// 100 MiB) until ctx is done.
func memOurs(ctx context.Context, tb testing.TB, srv *childServer, handled func()) error {
	cc := srv.dial(tb)
	defer cc.Close()
	s, err := pubsubflow.NewSubscriber(context.Background(), srv.sub, pubsubflow.SubscriberConfig{Conn: cc})
	if err != nil {
		return err
	}
	return s.Run(ctx, ourParallelism, func(context.Context, *pubsubflow.Message) error {
		handled()
		return nil
	})
}

// memGoogle runs Google's client with its default limits (1,000
// messages, 1e9 bytes) until ctx is done.
func memGoogle(ctx context.Context, tb testing.TB, srv *childServer, handled func()) error {
	c, err := pubsub.NewClient(context.Background(), srv.project(), option.WithGRPCConn(srv.dial(tb)))
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Subscriber(srv.sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		handled()
	})
}
