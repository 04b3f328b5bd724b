package bench

import (
	"sync"
	"testing"

	"github.com/pubsubflow/pubsubflow/message"
)

// BenchmarkBatchedHandOff is an experiment, not a composition we ship: the
// same parts as BenchmarkStageChain (lease extender, flow control,
// acknowledger, settle path), but the stages hand each other a response's
// worth of messages (100) per channel operation instead of one. Every
// message is still bound and leased on decode and takes its permit on
// receipt, before it can be processed; only the hand-offs are batched.
// It measures what the remedy named in BENCHMARKS.md ("Gaps") would buy.
//
//	go test -run '^$' -bench 'StageChain|BatchedHandOff' -benchtime 300000x -count 6 ./bench/
func BenchmarkBatchedHandOff(b *testing.B) {
	const batch = 100 // one StreamingPull response
	cp := newChainParts(b)
	b.ReportAllocs()
	b.ResetTimer()
	m := StartMeter(0)
	received := make(chan []*message.Message) // stream → gate
	admitted := make(chan []*message.Message) // gate → workers
	// The stream: bind and lease on decode.
	go func() {
		defer close(received)
		for i := 0; i < len(cp.msgs); i += batch {
			ms := cp.msgs[i:min(i+batch, len(cp.msgs))]
			for _, m := range ms {
				m.Bind(cp.settler)
				cp.ext.Track(m)
			}
			received <- ms
		}
	}()
	// The gate: a permit per message, on receipt.
	go func() {
		defer close(admitted)
		for ms := range received {
			for _, m := range ms {
				for !cp.fc.AcquireMessage(m) {
					wake := cp.fc.Wake()
					if cp.fc.AcquireMessage(m) {
						break
					}
					<-wake
				}
			}
			admitted <- ms
		}
	}()
	var wg sync.WaitGroup
	// The workers: handler and settle path.
	for range ourParallelism {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ms := range admitted {
				for _, m := range ms {
					m.Ack()
				}
			}
		}()
	}
	wg.Wait()
	r := m.Stop()
	b.StopTimer()
	b.ReportMetric(float64(r.CPU.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}
