package publisher

import "time"

// timerLoop closes batches whose Delay has passed. Every batch waits the
// same Delay, so opening order is deadline order and a FIFO list replaces
// a heap: the loop only ever looks at the front. It never holds p.mu while
// it waits.
func (p *Publisher) timerLoop() {
	defer p.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		wait := p.expire(time.Now())
		var fire <-chan time.Time
		if wait > 0 {
			t.Reset(wait)
			fire = t.C
		}
		select {
		case <-fire:
		case <-p.timerWake:
		case <-p.stop:
			return
		}
		t.Stop()
	}
}

// expire closes the open batches due at now and returns how long until the
// next one is due (0: none is open).
func (p *Publisher) expire(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.timers.Len() > 0 {
		b := p.timers.Front()
		if !b.open {
			p.timers.Pop()
			continue
		}
		if d := b.deadline.Sub(now); d > 0 {
			return d
		}
		p.timers.Pop()
		p.sealLocked(b)
	}
	p.timerIdle = true // the next batch opened wakes the loop
	return 0
}
