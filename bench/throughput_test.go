package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkThroughput consumes b.N messages from one in-process pubsubtest
// server (loopback TCP) with each client, for payloads of 64 B and 1 KiB
// and max outstanding 1,000 (the default) and 10,000, one stream. b.N is
// the number of messages, so ns/op and allocs/op are per message. A feeder
// keeps the backlog topped up, so the server never holds the whole run in
// its heap. The clock runs from the client's start until its handler has
// seen the last message (the server's having every ack is checked after).
//
// Metrics: msgs/s; cpu-ns/msg (user + system time of the whole process,
// server and feeder included, per message); allocs/op and B/op (whole
// process); peak-heap-B (largest sample of heap object bytes, taken every
// 2 ms, whole process).
//
//	go test -run '^$' -bench Throughput -benchtime 100000x -count 6 ./bench/ | tee throughput.txt
//	benchstat -col /client throughput.txt
func BenchmarkThroughput(b *testing.B) {
	for _, payload := range []int{64, 1024} {
		for _, outstanding := range []int{1000, 10000} {
			for _, c := range clients {
				name := fmt.Sprintf("payload=%dB/outstanding=%d/client=%s", payload, outstanding, c.name)
				b.Run(name, func(b *testing.B) {
					benchThroughput(b, c, payload, settings{outstanding: outstanding, streams: 1})
				})
			}
		}
	}
}

func benchThroughput(b *testing.B, c client, payload int, s settings) {
	e := newEnv(b, 60*time.Second)
	f := &feeder{e: e, total: b.N, payload: payload, low: 2*s.outstanding + 10000, chunk: 10000}
	f.prefill(b)
	runtime.GC()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	var handled atomic.Int64
	done := make(chan error, 1)

	b.ReportAllocs()
	b.ResetTimer()
	m := StartMeter(0)
	feedDone := make(chan struct{})
	go func() {
		defer close(feedDone)
		f.run(feedCtx, b)
	}()
	go func() { done <- c.run(ctx, b, e, s, func() { handled.Add(1) }) }()

	timeout := time.After(2*time.Minute + time.Duration(b.N)*time.Millisecond)
	wait := func(cond func() bool) {
		for !cond() {
			select {
			case err := <-done:
				b.Fatalf("%s stopped early: %v (%+v)", c.name, err, e.stats())
			case <-timeout:
				b.Fatalf("%s: timed out: %+v, %d handled, want %d", c.name, e.stats(), handled.Load(), b.N)
			case <-time.After(200 * time.Microsecond):
			}
		}
	}
	// The clock stops when the handler has seen the last message: the
	// last partial ack batch waits for a flush tick (100 ms for ours and
	// Google's), which would otherwise round every run up to a tick.
	wait(func() bool { return handled.Load() >= int64(b.N) })
	r := m.Stop()
	b.StopTimer()
	wait(func() bool { return e.stats().Acked >= int64(b.N) })

	stopFeed()
	<-feedDone
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	st := e.stats()
	if st.Redelivered != 0 || st.Expired != 0 {
		b.Errorf("%s: %d redelivered, %d expired", c.name, st.Redelivered, st.Expired)
	}
	n := float64(b.N)
	b.ReportMetric(n/r.Elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(r.CPU.Nanoseconds())/n, "cpu-ns/msg")
	b.ReportMetric(float64(r.PeakHeap), "peak-heap-B")
}
