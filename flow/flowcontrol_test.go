package flow

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
)

func newMsg(id int, size int) *message.Message {
	m := &message.Message{ID: strconv.Itoa(id), AckID: "ack-" + strconv.Itoa(id)}
	message.SetSize(m, size)
	return m
}

// releaser is a minimal settle path: it returns the message's permits.
type releaser struct {
	fc *FlowControl
	mu sync.Mutex
	n  int
}

func (r *releaser) Settle(m *message.Message, _ message.Outcome, _ time.Duration) {
	r.fc.ReleaseMessage(m)
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *releaser) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func TestFlowControlCountsBothLimits(t *testing.T) {
	fc := NewFlowControl(3, 100)
	for i := range 2 {
		if !fc.TryAcquire(40) {
			t.Fatalf("acquisition %d failed", i+1)
		}
	}
	if fc.TryAcquire(40) {
		t.Fatal("acquired past the byte limit")
	}
	if got, want := fc.Outstanding(), int64(2); got != want {
		t.Fatalf("Outstanding = %d, want %d", got, want)
	}
	if got, want := fc.OutstandingBytes(), int64(80); got != want {
		t.Fatalf("OutstandingBytes = %d, want %d", got, want)
	}
	if !fc.TryAcquire(20) {
		t.Fatal("a message that fits was refused")
	}
	if fc.Room() {
		t.Fatal("Room with 3 of 3 messages and 100 of 100 bytes")
	}
	if fc.TryAcquire(0) {
		t.Fatal("acquired past the message limit")
	}
	fc.Release(40)
	if !fc.Room() {
		t.Fatal("no Room after a release")
	}
	st := fc.Stats()
	if st.Acquired != 3 || st.Released != 1 || st.Outstanding != 2 || st.OutstandingBytes != 60 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestFlowControlUnlimited(t *testing.T) {
	fc := NewFlowControl(0, -1)
	for i := range 10_000 {
		if !fc.TryAcquire(i) {
			t.Fatalf("unlimited budget refused message %d", i)
		}
	}
	if !fc.Room() || fc.AtLimit(1<<40) {
		t.Fatal("unlimited budget reports a limit")
	}
	if got := fc.Outstanding(); got != 10_000 {
		t.Fatalf("Outstanding = %d", got)
	}
}

func TestFlowControlOversizeAdmittedAlone(t *testing.T) {
	fc := NewFlowControl(10, 100)
	if !fc.TryAcquire(10) {
		t.Fatal("small message refused")
	}
	if fc.TryAcquire(500) {
		t.Fatal("oversize message admitted while bytes are outstanding")
	}
	fc.Release(10)
	if !fc.TryAcquire(500) {
		t.Fatal("oversize message refused with nothing outstanding (deadlock)")
	}
	if got := fc.OutstandingBytes(); got != 500 {
		t.Fatalf("OutstandingBytes = %d, want the true size 500", got)
	}
	if fc.TryAcquire(1) {
		t.Fatal("admitted next to an oversize message")
	}
	fc.Release(500)
	if st := fc.Stats(); st.Outstanding != 0 || st.OutstandingBytes != 0 {
		t.Fatalf("after release: %+v", st)
	}
	if !fc.TryAcquire(100) {
		t.Fatal("budget not fully returned after the oversize release")
	}
}

func TestFlowControlMessageRecord(t *testing.T) {
	fc := NewFlowControl(2, 0)
	m := newMsg(1, 10)
	if !fc.AcquireMessage(m) || !fc.Holds(m) {
		t.Fatal("AcquireMessage failed")
	}
	if !fc.AcquireMessage(m) || fc.Outstanding() != 1 {
		t.Fatal("second AcquireMessage of the same message took permits")
	}
	if !fc.ReleaseMessage(m) {
		t.Fatal("ReleaseMessage of a holder returned false")
	}
	if fc.ReleaseMessage(m) {
		t.Fatal("second ReleaseMessage released again")
	}
	settled := newMsg(2, 10)
	settled.Ack()
	if !fc.AcquireMessage(settled) || fc.Holds(settled) || fc.Outstanding() != 0 {
		t.Fatal("a settled message took permits")
	}
	if fc.ReleaseMessage(newMsg(3, 10)) {
		t.Fatal("released a message that never held permits")
	}
	if st := fc.Stats(); st.Acquired != st.Released || st.Outstanding != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestFlowControlWakeBroadcast(t *testing.T) {
	fc := NewFlowControl(1, 0)
	if !fc.TryAcquire(1) {
		t.Fatal("acquire failed")
	}
	w1, w2 := fc.Wake(), fc.Wake()
	if w1 != w2 {
		t.Fatal("two waiters got different channels before a release")
	}
	select {
	case <-w1:
		t.Fatal("woken before any release")
	default:
	}
	fc.Release(1)
	for _, w := range []<-chan struct{}{w1, w2} {
		select {
		case <-w:
		default:
			t.Fatal("a waiter was not woken by Release")
		}
	}
	if w3 := fc.Wake(); w3 == w1 {
		t.Fatal("Wake after a release returned the closed channel")
	}
}

func TestFlowControlAtLimit(t *testing.T) {
	fc := NewFlowControl(10, 0)
	for range 6 {
		fc.TryAcquire(1)
	}
	if fc.AtLimit(3) {
		t.Fatal("6 outstanding + 3 unacked of 10 reported at limit")
	}
	if !fc.AtLimit(4) {
		t.Fatal("6 outstanding + 4 unacked of 10 not at limit")
	}
	fc.buffered.Add(1)
	if fc.AtLimit(4) {
		t.Fatal("at limit although a gate still buffers work")
	}
}

// TestFlowControlConcurrent hammers one budget from many goroutines: the
// counts never pass the limits and return to zero.
func TestFlowControlConcurrent(t *testing.T) {
	const limit, bytes = 8, 800
	fc := NewFlowControl(limit, bytes)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var violations []string
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				size := 1 + (w*31+i*17)%150
				if !fc.TryAcquire(size) {
					continue
				}
				if n, b := fc.Outstanding(), fc.OutstandingBytes(); n > limit || b > bytes {
					mu.Lock()
					violations = append(violations, strconv.Itoa(int(n))+"/"+strconv.Itoa(int(b)))
					mu.Unlock()
				}
				fc.Release(size)
			}
		}()
	}
	wg.Wait()
	if len(violations) > 0 {
		t.Fatalf("limits exceeded: %v", violations[:min(5, len(violations))])
	}
	if st := fc.Stats(); st.Outstanding != 0 || st.OutstandingBytes != 0 || st.Acquired != st.Released {
		t.Fatalf("Stats = %+v", st)
	}
}
