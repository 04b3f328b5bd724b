package pubsubtest

import (
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// message is one published message, shared read-only by every subscription
// of its topic and by every response that carries it.
type message struct {
	seq  uint64 // numeric message id, 1, 2, …; see Server.countersLocked
	pb   *pubsubpb.PubsubMessage
	size int64 // encoded size, counted against max_outstanding_bytes
}

// entryState says where one message of one subscription currently is.
type entryState uint8

const (
	stateReady   entryState = iota // in subscription.ready, waiting for a puller
	stateKeyWait                   // behind an earlier message of its ordering key
	stateOut                       // delivered, its ack id live, its deadline in the heap
	stateAcked                     // acknowledged; never delivered again
	stateGone                      // its subscription was deleted
)

// entry is one message in one subscription: its delivery state, the live ack
// id and the deadline. Exactly one of the ready queue, a key queue or the
// lease heap holds it at a time, so every transition is O(1) or O(log n).
type entry struct {
	msg      *message
	sub      *subscription
	state    entryState
	attempts int32     // deliveries so far; the next delivery sends attempts+1
	ackID    string    // live ack id while stateOut
	deadline time.Time // ack deadline while stateOut
	heapIdx  int       // index in Server.leases, -1 when not in it
	stream   *stream   // stream it is outstanding on; nil when pulled by Pull
}

// leaseHeap is a min-heap of outstanding entries by ack deadline. One timer
// goroutine waits for its top, instead of one timer per message.
type leaseHeap []*entry

func (h leaseHeap) less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h leaseHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *leaseHeap) push(e *entry) {
	e.heapIdx = len(*h)
	*h = append(*h, e)
	h.up(e.heapIdx)
}

func (h *leaseHeap) remove(e *entry) {
	i := e.heapIdx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	e.heapIdx = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the heap order after the deadline of the entry at i changed.
func (h leaseHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h leaseHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h leaseHeap) down(i0 int) bool {
	i := i0
	n := len(h)
	for {
		j1 := 2*i + 1
		if j1 >= n {
			break
		}
		j := j1
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
