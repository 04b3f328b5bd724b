package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkThroughput consumes b.N messages from a pubsubtest server in a
// child process (this test binary, re-run; loopback TCP) with each client,
// for payloads of 64 B and 1 KiB and max outstanding 1,000 (the default)
// and 10,000, one stream. b.N is the number of messages, so ns/op and
// allocs/op are per message. A feeder in the child keeps the backlog
// topped up, so the server never holds the whole run in its heap. The
// clock runs from the client's start until its handler has seen the last
// message (the server's having every ack is checked after).
//
// Metrics, all of the benchmark's process, which holds only the client
// (the server and feeder run in the child, on the same 2 cores): msgs/s;
// cpu-ns/msg (user + system time per message); allocs/op and B/op;
// peak-heap-B (largest sample of heap object bytes, taken every 2 ms).
// srv-cpu-ns/msg is the server child's CPU per message, from GO until it
// had every ack (the feeder's publishing included): what the client
// costs the other side of the same two cores. msgs/resp, msgs/ack-rpc
// and msgs/modack-rpc are the messages per StreamingPull response,
// Acknowledge call and ModifyAckDeadline call the server counted (the
// last is left out for a client that sent none).
//
//	go test -run '^$' -bench 'Throughput$' -benchtime 100000x -count 6 ./bench/ | tee throughput.txt
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
	srv := startChild(b, fmt.Sprintf("%s=%d:%d:%d", feedEnv, b.N, payload, 2*s.outstanding+10000))
	runtime.GC()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	done := make(chan error, 1)

	b.ReportAllocs()
	b.ResetTimer()
	m := StartMeter(0)
	srv.send(b, "GO")
	go func() { done <- c.run(ctx, b, srv, s, func() { handled.Add(1) }) }()

	timeout := time.After(2*time.Minute + time.Duration(b.N)*time.Millisecond)
	for handled.Load() < int64(b.N) {
		select {
		case err := <-done:
			b.Fatalf("%s stopped early: %v", c.name, err)
		case <-timeout:
			b.Fatalf("%s: timed out: %d handled, want %d", c.name, handled.Load(), b.N)
		case <-time.After(200 * time.Microsecond):
		}
	}
	// The clock stops when the handler has seen the last message: Google's
	// last partial ack batch waits for its 100 ms flush tick, which would
	// otherwise round its runs up to a tick.
	r := m.Stop()
	b.StopTimer()
	acked, redelivered, expired := srv.waitAcked(b)
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	if acked < int64(b.N) || redelivered != 0 || expired != 0 {
		b.Errorf("%s: %d acked of %d, %d redelivered, %d expired", c.name, acked, b.N, redelivered, expired)
	}
	n := float64(b.N)
	b.ReportMetric(n/r.Elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(r.CPU.Nanoseconds())/n, "cpu-ns/msg")
	b.ReportMetric(float64(r.PeakHeap), "peak-heap-B")
	if srv.cpu > 0 {
		b.ReportMetric(float64(srv.cpu.Nanoseconds())/n, "srv-cpu-ns/msg")
	}
	if srv.responses > 0 && srv.acks > 0 {
		b.ReportMetric(n/float64(srv.responses), "msgs/resp")
		b.ReportMetric(n/float64(srv.acks), "msgs/ack-rpc")
	}
	if srv.modacks > 0 {
		b.ReportMetric(n/float64(srv.modacks), "msgs/modack-rpc")
	}
}
