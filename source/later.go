package source

import (
	"container/heap"
	"sync"
	"time"
)

// later calls a settled message's Done once its deadline has passed: a
// message released with NoOp, expired, or nacked with a delay stays the
// server's until then, so a flow budget must not give its room to a new
// stream earlier. One timer serves every waiting message.
type later struct {
	mu     sync.Mutex
	q      dueHeap
	timer  *time.Timer
	closed bool
	wg     sync.WaitGroup // a fire in progress
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
	if l.q[0].m == m { // the earliest now: the timer fires for it
		if l.timer == nil {
			l.timer = time.AfterFunc(time.Until(at), l.fire)
		} else {
			l.timer.Reset(time.Until(at))
		}
	}
	l.mu.Unlock()
}

func (l *later) fire() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.wg.Add(1) // before close can wait: it sets closed under mu
	defer l.wg.Done()
	now := time.Now()
	var ready []*Message
	for len(l.q) > 0 && !now.Before(l.q[0].at) {
		ready = append(ready, heap.Pop(&l.q).(due).m)
	}
	if len(l.q) > 0 {
		l.timer.Reset(time.Until(l.q[0].at))
	}
	l.mu.Unlock()
	for _, m := range ready {
		m.st.Done(m)
	}
}

// close calls every waiting message's Done at once and stops the timer.
func (l *later) close() {
	l.mu.Lock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	q := l.q
	l.q = nil
	l.mu.Unlock()
	l.wg.Wait()
	for _, d := range q {
		d.m.st.Done(d.m)
	}
}
