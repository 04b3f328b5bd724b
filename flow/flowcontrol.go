package flow

import (
	"sync"
	"sync/atomic"

	"github.com/pubsubflow/pubsubflow/internal/message"
)

// FlowControl is a subscriber's client-side flow-control budget: at most
// MaxMessages messages and MaxBytes bytes outstanding, where a message is
// outstanding from the moment a FlowGate admits it (on receipt) until it is
// settled (ack, nack, no-op, lease expiry, shutdown).
//
// Outstanding and OutstandingBytes are exact at every moment. One message
// larger than MaxBytes is admitted when no bytes are outstanding (it takes
// the whole byte budget), so an oversize message can never deadlock the
// subscriber.
//
// A message that has already arrived is never refused: the receipt step
// (Receive) counts it at once, and the stream that read it stops reading
// while there is no Room. What keeps the count within the limits is that
// each stream asks the server, on its initial request, only for the room
// that is left (OpenLane): the server never sends more than that.
//
// Which messages hold a permit is recorded per message (AcquireMessage,
// ReleaseMessage), so that a permit is released exactly once whichever
// path settles the message first, and a message settled before it was
// admitted releases nothing. All methods are safe for concurrent use; one
// FlowControl may be shared by several gates (several streams).
type FlowControl struct {
	maxMessages int64 // 0: unlimited
	maxBytes    int64 // 0: unlimited

	// mu guards held and lanes, and serialises acquisitions.
	mu    sync.Mutex
	held  map[*message.Message]permit
	lanes []lane // by stream index

	outstanding      atomic.Int64
	outstandingBytes atomic.Int64
	waiting          atomic.Int64 // received by a gate, waiting for a permit
	buffered         atomic.Int64 // admitted, in a gate's buffer, not yet offered downstream
	acquired         atomic.Int64 // permits ever acquired
	released         atomic.Int64 // permits ever released

	// wake is closed and cleared by the next Release; made on demand by
	// Wake, so releases nobody waits for cost one atomic load.
	wake atomic.Pointer[chan struct{}]
}

// Defaults a subscriber uses for its flow-control budget (Google's clients'
// defaults).
const (
	DefaultMaxMessages = 1000
	DefaultMaxBytes    = 100 << 20
)

// NewFlowControl returns a budget of maxMessages messages and maxBytes
// bytes. A limit ≤ 0 means that dimension is unlimited (NewFlowControl(0, 0)
// admits everything but still counts).
func NewFlowControl(maxMessages, maxBytes int64) *FlowControl {
	return &FlowControl{
		held:        make(map[*message.Message]permit),
		maxMessages: max(maxMessages, 0),
		maxBytes:    max(maxBytes, 0),
	}
}

// MaxMessages is the message limit (0: unlimited).
func (fc *FlowControl) MaxMessages() int64 { return fc.maxMessages }

// MaxBytes is the byte limit (0: unlimited).
func (fc *FlowControl) MaxBytes() int64 { return fc.maxBytes }

// TryAcquire takes the permits of one message of size bytes if the budget
// allows it now, without waiting, and reports whether it did. A message
// larger than MaxBytes is admitted only when no bytes are outstanding. Every
// successful TryAcquire must be paired with exactly one Release(size); use
// AcquireMessage / ReleaseMessage to have the pairing kept for you.
func (fc *FlowControl) TryAcquire(size int) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.tryAcquireLocked(int64(size))
}

func (fc *FlowControl) tryAcquireLocked(size int64) bool {
	size = max(size, 0)
	n, b := fc.outstanding.Load(), fc.outstandingBytes.Load()
	if fc.maxMessages > 0 && n >= fc.maxMessages {
		return false
	}
	if fc.maxBytes > 0 && b > 0 && b+size > fc.maxBytes {
		return false // an oversize message goes only when no bytes are out
	}
	fc.countLocked(size)
	return true
}

// countLocked counts one message of size bytes as outstanding.
func (fc *FlowControl) countLocked(size int64) {
	fc.outstanding.Add(1)
	fc.outstandingBytes.Add(size)
	fc.acquired.Add(1)
}

// Release returns the permits of one message of size bytes taken by a
// successful TryAcquire(size), and wakes whoever waits on Wake.
func (fc *FlowControl) Release(size int) { fc.release(int64(size)) }

func (fc *FlowControl) release(size int64) { fc.releaseN(1, max(size, 0)) }

// ReleaseN returns the permits of n messages totalling bytes, taken by n
// successful TryAcquire calls, and wakes whoever waits on Wake: one
// Release per message, in one step.
func (fc *FlowControl) ReleaseN(n, bytes int) { fc.releaseN(int64(n), int64(max(bytes, 0))) }

func (fc *FlowControl) releaseN(n, bytes int64) {
	// Counters first, wake last: whoever fetched Wake before this point is
	// woken, whoever fetches it after sees the room.
	fc.outstanding.Add(-n)
	fc.outstandingBytes.Add(-bytes)
	fc.released.Add(n)
	fc.broadcast()
}

// Broadcast wakes whoever waits on Wake, for a change of room that is not
// a release (a stream's lane closed, acks confirmed by the server).
func (fc *FlowControl) Broadcast() { fc.broadcast() }

func (fc *FlowControl) broadcast() {
	if fc.wake.Load() == nil {
		return
	}
	if p := fc.wake.Swap(nil); p != nil {
		close(*p)
	}
}

// AcquireMessage takes m's permits (m.Size() bytes) if the budget allows
// it now and records that m holds them. It reports whether m may go on: true
// when the permits were taken, and also when m was already settled (it then
// holds nothing: its settle path has run or is running). A message settled
// concurrently with AcquireMessage has its permits released at once, so
// nothing leaks either way. Acquiring for a message that already holds
// permits is a no-op that returns true.
func (fc *FlowControl) AcquireMessage(m *message.Message) bool {
	if m.Settled() {
		return true
	}
	size := int64(m.Size())
	fc.mu.Lock()
	if _, ok := fc.held[m]; ok {
		fc.mu.Unlock()
		return true
	}
	if !fc.tryAcquireLocked(size) {
		fc.mu.Unlock()
		return false
	}
	// Settle sets the outcome before it calls the settle path, and the
	// settle path's ReleaseMessage takes mu after us: if m is not settled
	// now, that ReleaseMessage will find the record.
	if m.Settled() {
		fc.mu.Unlock()
		fc.release(size)
		return true
	}
	fc.held[m] = permit{size: size, lane: noLane}
	fc.mu.Unlock()
	return true
}

// ReleaseMessage returns m's permits if m holds any, and reports whether it
// did. It is idempotent, so every path that ends a message may call it;
// only the first call releases.
func (fc *FlowControl) ReleaseMessage(m *message.Message) bool {
	fc.mu.Lock()
	p, ok := fc.held[m]
	if ok {
		delete(fc.held, m)
		if p.lane != noLane {
			if l := &fc.lanes[p.lane]; l.gen == p.gen {
				l.heldMsgs--
				l.heldBytes -= p.size
			}
		}
	}
	fc.mu.Unlock()
	if ok {
		fc.release(p.size)
	}
	return ok
}

// Holds reports whether m currently holds permits.
func (fc *FlowControl) Holds(m *message.Message) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	_, ok := fc.held[m]
	return ok
}

// Room reports whether another message could be admitted now as far as the
// counts go: fewer than MaxMessages messages and fewer than MaxBytes bytes
// outstanding. A gate does not receive while Room is false.
func (fc *FlowControl) Room() bool {
	if fc.maxMessages > 0 && fc.outstanding.Load() >= fc.maxMessages {
		return false
	}
	if fc.maxBytes > 0 && fc.outstandingBytes.Load() >= fc.maxBytes {
		return false
	}
	return true
}

// Wake returns a channel closed at the next Release (a broadcast: every
// caller that fetched it is woken). To wait without missing a release,
// fetch Wake first, then check Room or TryAcquire, then wait.
func (fc *FlowControl) Wake() <-chan struct{} {
	for {
		if p := fc.wake.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if fc.wake.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// AtLimit reports whether acks held back would now starve the subscriber,
// so an acknowledger should send them at once instead of waiting for its
// flush interval. It is true when the outstanding messages plus unacked
// (messages settled here whose acks or nacks the server has not received
// yet) reach MaxMessages — with the server's outstanding limit equal to
// ours, the server then delivers nothing until it hears those acks — and no
// gate has work queued beyond the message it is offering downstream
// (Buffered() == 0). Always false when messages are unlimited. It reads
// atomics only and never blocks.
//
// Without it, throughput is capped at MaxMessages per flush interval (about
// 10,000 messages/s with the defaults, the cap of Google's Go client); with
// it, a fast pipeline that drains its buffer gets its acks sent as soon as
// they hold the server back, and a slow one (a full buffer) still batches.
func (fc *FlowControl) AtLimit(unacked int64) bool {
	if fc == nil || fc.maxMessages <= 0 {
		return false
	}
	return fc.outstanding.Load()+unacked >= fc.maxMessages && fc.buffered.Load() <= 0
}

// Outstanding is the number of messages holding permits now.
func (fc *FlowControl) Outstanding() int64 { return fc.outstanding.Load() }

// OutstandingBytes is the bytes of the messages holding permits now (their
// full sizes: above MaxBytes only while one oversize message is alone).
func (fc *FlowControl) OutstandingBytes() int64 { return fc.outstandingBytes.Load() }

// Waiting is the number of messages gates have received that wait for a
// permit (at most one per gate). Received and unsettled messages number
// Outstanding() + Waiting(); a message settled while it waits is counted
// until its gate next asks for its permit.
func (fc *FlowControl) Waiting() int64 { return fc.waiting.Load() }

// Buffered is the number of admitted messages queued in gates' buffers
// behind the one each gate is offering downstream: the work queued for
// processing beyond what processing is about to take.
func (fc *FlowControl) Buffered() int64 { return fc.buffered.Load() }

// Stats is a snapshot of a FlowControl's counters.
type Stats struct {
	Outstanding      int64
	OutstandingBytes int64
	Waiting          int64
	Buffered         int64
	// Acquired and Released count permits (messages) ever taken and
	// returned; Acquired - Released == Outstanding once quiet.
	Acquired int64
	Released int64
}

// Stats returns the counters (each read atomically, not all at one instant).
func (fc *FlowControl) Stats() Stats {
	return Stats{
		Outstanding:      fc.outstanding.Load(),
		OutstandingBytes: fc.outstandingBytes.Load(),
		Waiting:          fc.waiting.Load(),
		Buffered:         fc.buffered.Load(),
		Acquired:         fc.acquired.Load(),
		Released:         fc.released.Load(),
	}
}
