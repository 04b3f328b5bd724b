package message

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type countingSettler struct {
	n    atomic.Int64
	last atomic.Uint32
}

func (c *countingSettler) Settle(m *Message, o Outcome, d time.Duration) {
	c.n.Add(1)
	c.last.Store(uint32(o))
}

// TestFirstOutcomeWins races every outcome from many goroutines, with Bind
// in the middle: exactly one reaches the settler.
func TestFirstOutcomeWins(t *testing.T) {
	for range 200 {
		m := &Message{AckID: "a"}
		s := &countingSettler{}
		var wg sync.WaitGroup
		var wins atomic.Int64
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i == 4 {
					Bind(m, s)
					return
				}
				if Settle(m, Outcome(1+i%5), time.Second) {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 || s.n.Load() != 1 {
			t.Fatalf("wins %d, settler calls %d", wins.Load(), s.n.Load())
		}
		if Outcome(s.last.Load()) != m.Outcome() {
			t.Fatalf("settler saw %v, message says %v", Outcome(s.last.Load()), m.Outcome())
		}
	}
}

func TestResultResolvesOnce(t *testing.T) {
	r := NewResult()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); Resolve(r, nil) }()
	}
	wg.Wait()
	<-r.Done()
}
