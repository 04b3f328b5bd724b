package flow

import (
	"testing"
	"time"
)

// BenchmarkTickScan measures one tick over 10,000 leases of which none is
// due: the per-tick cost of scanning the table under the mutex (the time
// track may wait for the lock at worst).
func BenchmarkTickScan(b *testing.B) {
	e, err := NewExtender(&capture{}, ExtenderConfig{StreamAckDeadline: 600 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	e.track(handMade(testSub, 10000, 300, false))
	for e.pendingLen() > 0 { // wait for the receipt flush
		time.Sleep(time.Millisecond)
	}
	for b.Loop() {
		e.tick()
	}
}
