package flow

import (
	"testing"
	"time"
)

// BenchmarkTickScan measures one tick over 10,000 leases of which none is
// due: the per-tick cost of scanning the table under the mutex (the time
// Track may wait for the lock at worst).
func BenchmarkTickScan(b *testing.B) {
	e, err := NewExtender(&capture{}, "projects/p/subscriptions/s", ExtenderConfig{StreamAckDeadline: 600 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, m := range handMade("", 10000, 300, false) {
		e.Track(m)
	}
	for e.pendingLen() > 0 { // wait for the receipt flush
		time.Sleep(time.Millisecond)
	}
	for b.Loop() {
		e.tick()
	}
}
