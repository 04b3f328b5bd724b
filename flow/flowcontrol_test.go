package flow

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

func newMsg(id int, size int) *source.Message {
	m := &source.Message{ID: strconv.Itoa(id), AckID: "ack-" + strconv.Itoa(id)}
	message.Of(m).Size = size
	return m
}

// settles is a Holder that counts how often each message was settled and
// done (its source's settle path would tell the server).
type settles struct {
	mu      sync.Mutex
	settled map[*source.Message]int
	done    map[*source.Message]int
}

func newSettles() *settles {
	return &settles{settled: map[*source.Message]int{}, done: map[*source.Message]int{}}
}

// hold attaches s to m and returns m.
func (s *settles) hold(m *source.Message) *source.Message {
	message.Of(m).Hold(m, new(message.HoldNode), s)
	return m
}

func (s *settles) Settled(m any, _ uint32) {
	s.mu.Lock()
	s.settled[m.(*source.Message)]++
	s.mu.Unlock()
}

func (s *settles) Done(m any, _ time.Time) {
	s.mu.Lock()
	s.done[m.(*source.Message)]++
	s.mu.Unlock()
}

// count is the number of Settled calls.
func (s *settles) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.settled {
		n += c
	}
	return n
}

// of is how often m was settled and done.
func (s *settles) of(m *source.Message) (settled, done int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settled[m], s.done[m]
}

func TestFlowControlCountsBothLimits(t *testing.T) {
	fc := NewFlowControl(3, 100)
	for i := range 2 {
		if !fc.tryAcquire(40) {
			t.Fatalf("acquisition %d failed", i+1)
		}
	}
	if fc.tryAcquire(40) {
		t.Fatal("acquired past the byte limit")
	}
	if got, want := fc.Outstanding(), int64(2); got != want {
		t.Fatalf("Outstanding = %d, want %d", got, want)
	}
	if got, want := fc.OutstandingBytes(), int64(80); got != want {
		t.Fatalf("OutstandingBytes = %d, want %d", got, want)
	}
	if !fc.tryAcquire(20) {
		t.Fatal("a message that fits was refused")
	}
	if fc.Room() {
		t.Fatal("Room with 3 of 3 messages and 100 of 100 bytes")
	}
	if fc.tryAcquire(0) {
		t.Fatal("acquired past the message limit")
	}
	fc.releaseN(1, 40)
	if !fc.Room() {
		t.Fatal("no Room after a release")
	}
	st := fc.Stats()
	if st.Acquired != 3 || st.Released != 1 || st.Outstanding != 2 || st.OutstandingBytes != 60 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestFlowControlUnlimited(t *testing.T) {
	fc := NewFlowControl(Unlimited, Unlimited)
	for i := range 10_000 {
		if !fc.tryAcquire(i) {
			t.Fatalf("unlimited budget refused message %d", i)
		}
	}
	if !fc.Room() {
		t.Fatal("unlimited budget reports a limit")
	}
	if got := fc.Outstanding(); got != 10_000 {
		t.Fatalf("Outstanding = %d", got)
	}
}

func TestFlowControlOversizeAdmittedAlone(t *testing.T) {
	fc := NewFlowControl(10, 100)
	if !fc.tryAcquire(10) {
		t.Fatal("small message refused")
	}
	if fc.tryAcquire(500) {
		t.Fatal("oversize message admitted while bytes are outstanding")
	}
	fc.releaseN(1, 10)
	if !fc.tryAcquire(500) {
		t.Fatal("oversize message refused with nothing outstanding (deadlock)")
	}
	if got := fc.OutstandingBytes(); got != 500 {
		t.Fatalf("OutstandingBytes = %d, want the true size 500", got)
	}
	if fc.tryAcquire(1) {
		t.Fatal("admitted next to an oversize message")
	}
	fc.releaseN(1, 500)
	if st := fc.Stats(); st.Outstanding != 0 || st.OutstandingBytes != 0 {
		t.Fatalf("after release: %+v", st)
	}
	if !fc.tryAcquire(100) {
		t.Fatal("budget not fully returned after the oversize release")
	}
}

// TestFlowControlPermitReleasedOnce: a message's permit (taken by the
// receipt step) goes back once, whatever settles it first; a message
// settled already takes none; settling a message that holds no permit
// releases nothing.
func TestFlowControlPermitReleasedOnce(t *testing.T) {
	fc := NewFlowControl(2, Unlimited)
	m := newMsg(1, 10)
	if fc.receive(-1, []*source.Message{m}); fc.Outstanding() != 1 || fc.OutstandingBytes() != 10 {
		t.Fatalf("receive: %+v", fc.Stats())
	}
	message.Of(m).Settle(m, message.Expired, 0) // the lease ran out first
	if fc.Outstanding() != 0 || fc.OutstandingBytes() != 0 {
		t.Fatalf("after the expiry: %+v", fc.Stats())
	}
	if m.Ack() || m.Nack() || fc.Stats().Released != 1 {
		t.Fatalf("later outcomes released again: %+v", fc.Stats())
	}
	settled := newMsg(2, 10)
	settled.Ack()
	fc.receive(0, []*source.Message{settled})
	if fc.Outstanding() != 0 || fc.Stats().Acquired != 1 {
		t.Fatal("the receipt step counted a settled message")
	}
	newMsg(3, 10).Nack() // never held a permit
	if st := fc.Stats(); st.Acquired != st.Released || st.Outstanding != 0 || st.ServerHeld != 0 {
		t.Fatalf("Stats = %+v", st)
	}

	// The receipt step counts a whole batch at once, even past the limit
	// (the messages are in the client's hands), and each message's
	// settle path returns its own permit.
	ms := []*source.Message{newMsg(4, 5), newMsg(5, 6), newMsg(6, 7)}
	fc.receive(-1, ms)
	if fc.Outstanding() != 3 || fc.OutstandingBytes() != 18 || fc.Room() {
		t.Fatalf("after Receive: %+v", fc.Stats())
	}
	for i, m := range ms {
		m.NoOp()
		m.NoOp()
		if got := fc.Outstanding(); got != int64(2-i) {
			t.Fatalf("Outstanding %d after %d settled", got, i+1)
		}
	}
	if st := fc.Stats(); st.Acquired != 4 || st.Released != 4 || st.OutstandingBytes != 0 || st.ServerHeld != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestFlowControlWakeBroadcast(t *testing.T) {
	fc := NewFlowControl(1, Unlimited)
	if !fc.tryAcquire(1) {
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
	fc.releaseN(1, 1)
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
				if !fc.tryAcquire(size) {
					continue
				}
				if n, b := fc.Outstanding(), fc.OutstandingBytes(); n > limit || b > bytes {
					mu.Lock()
					violations = append(violations, strconv.Itoa(int(n))+"/"+strconv.Itoa(int(b)))
					mu.Unlock()
				}
				fc.releaseN(1, size)
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

// TestFlowControlLimits: 0 is the default, any negative limit is
// Unlimited, as in every config.
func TestFlowControlLimits(t *testing.T) {
	if fc := NewFlowControl(0, 0); fc.MaxMessages() != DefaultMaxMessages || fc.MaxBytes() != DefaultMaxBytes {
		t.Errorf("NewFlowControl(0, 0): %d messages, %d bytes; want the defaults", fc.MaxMessages(), fc.MaxBytes())
	}
	if fc := NewFlowControl(Unlimited, -5); fc.MaxMessages() != Unlimited || fc.MaxBytes() != Unlimited {
		t.Errorf("NewFlowControl(Unlimited, -5): %d, %d; want Unlimited both", fc.MaxMessages(), fc.MaxBytes())
	}
}

// releaseN returns the permits of n messages totalling bytes that
// tryAcquire took, as their settle paths would.
func (fc *FlowControl) releaseN(n, bytes int) {
	fc.add(-int64(n), -int64(bytes))
	fc.wake.Broadcast()
}
