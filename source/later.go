package source

import (
	"container/heap"
	"sync"
	"time"
)

// later tells a settled message's holders that the server no longer
// counts it (State.Done) once its deadline has passed: a message released
// with NoOp, expired, or nacked with a delay stays the server's until then,
// so a flow budget must not hand its room to a new stream earlier. One
// timer serves every waiting message; the queue holds at most the
// source's settled-but-counted messages.
type later struct {
	mu     sync.Mutex
	q      dueHeap
	timer  *time.Timer
	at     time.Time
	closed bool
	wg     sync.WaitGroup
}

type due struct {
	at time.Time
	m  *Message
}

type dueHeap []due

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(due)) }
func (h *dueHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = due{}
	*h = old[:len(old)-1]
	return d
}

// done calls m's Done at at (at once if that has passed, or after close).
func (l *later) done(m *Message, at time.Time) {
	l.mu.Lock()
	if l.closed || !time.Now().Before(at) {
		l.mu.Unlock()
		m.st.Done(m)
		return
	}
	heap.Push(&l.q, due{at: at, m: m})
	l.armLocked()
	l.mu.Unlock()
}

func (l *later) armLocked() {
	if len(l.q) == 0 {
		return
	}
	next := l.q[0].at
	if l.timer != nil {
		if !next.Before(l.at) {
			return
		}
		if !l.timer.Stop() {
			return // firing now: it re-arms for what is left
		}
		l.wg.Done()
	}
	l.at = next
	l.wg.Add(1)
	l.timer = time.AfterFunc(time.Until(next), l.fire)
}

func (l *later) fire() {
	defer l.wg.Done()
	now := time.Now()
	var ready []*Message
	l.mu.Lock()
	l.timer = nil
	for len(l.q) > 0 && !now.Before(l.q[0].at) {
		ready = append(ready, heap.Pop(&l.q).(due).m)
	}
	if !l.closed {
		l.armLocked()
	}
	l.mu.Unlock()
	for _, m := range ready {
		m.st.Done(m)
	}
}

// close tells every waiting message's holders at once and stops the timer.
func (l *later) close() {
	l.mu.Lock()
	l.closed = true
	if l.timer != nil && l.timer.Stop() {
		l.wg.Done()
	}
	l.timer = nil
	q := l.q
	l.q = nil
	l.mu.Unlock()
	l.wg.Wait()
	for _, d := range q {
		d.m.st.Done(d.m)
	}
}
