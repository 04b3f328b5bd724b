package flow

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/pubsubflow/pubsubflow/internal/ack"
	"github.com/pubsubflow/pubsubflow/internal/ackids"
	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/message"
)

// loop flushes receipt modacks shortly after track queued them, and
// ticks. It never waits for an RPC.
func (e *Extender) loop() {
	defer close(e.loopDone)
	var tickAt time.Time
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	reset := func(d time.Duration) {
		tick.Reset(d)
		tickAt = time.Now().Add(d)
	}
	reset(jittered(e.policy.interval()))
	var flush <-chan time.Time // nil unless a receipt flush is due
	for {
		select {
		case <-e.quit:
			return
		case <-e.wake:
			if e.pendingLen() < ackids.MaxIDs {
				if flush == nil {
					flush = time.After(receiptFlushDelay)
				}
				continue
			}
		case <-flush:
			flush = nil
		case <-tick.C:
			reset(e.tick())
			continue
		}
		e.flushReceipts()
		// A deadline that dropped since the tick was scheduled brings it
		// forward: a lease granted the shorter one must not lapse.
		if d := jittered(e.policy.interval()); time.Now().Add(d).Before(tickAt) {
			reset(d)
		}
	}
}

func jittered(d time.Duration) time.Duration {
	f := 1 - jitter + 2*jitter*rand.Float64()
	return max(time.Duration(float64(d)*f), time.Millisecond)
}

func (e *Extender) pendingLen() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.npending
}

// deadlineFor is d for a message, at least 60 s if exactly-once.
func deadlineFor(eo bool, d time.Duration) time.Duration {
	if eo {
		d = max(d, exactlyOnceMinDeadline)
	}
	return min(ceilSeconds(d), maxDeadline)
}

// flushReceipts sends the queued receipt modacks of the leases not
// released since.
func (e *Extender) flushReceipts() {
	d := e.policy.deadline()
	e.mu.Lock()
	b := batcher{}
	for _, s := range e.pending {
		for i := range s {
			if l := &s[i]; l.e != nil && !l.gone.Load() && l.state == stateReceipt {
				b.add(l, deadlineFor(l.eo, d))
			}
		}
	}
	clear(e.pending)
	e.pending, e.npending = e.pending[:0], 0
	e.mu.Unlock()
	e.dispatch(b, true)
}

// tick extends the leases that would expire before the next tick plus the
// margin, drops the ones lapsed or past the maximum extension, and
// returns the delay to the next tick. Its scan is O(leases) under the
// mutex (BenchmarkTickScan).
func (e *Extender) tick() time.Duration {
	now := time.Now()
	nowNs, d, next := now.UnixNano(), e.policy.deadline(), jittered(e.policy.interval())
	horizon := nowNs + int64(next+min(e.cfg.Margin, d/2))
	maxExt := int64(e.cfg.MaxExtension)
	b := batcher{}
	var lapsed, expired []*lease
	firstLapse := int64(math.MaxInt64)
	e.mu.Lock()
	e.sweepLocked(nowNs, func(l *lease) {
		if l.state == stateDropping {
			return
		}
		st := message.Of(l.m)
		lapse := st.LapseAt().UnixNano()
		switch {
		case nowNs >= lapse: // no confirmed extension: the server may give it out again
			l.state = stateDropping
			lapsed = append(lapsed, l)
			return
		case maxExt > 0 && nowNs-l.received >= maxExt:
			l.state = stateDropping
			expired = append(expired, l)
			return
		case l.state == stateIdle && st.DeadlineNanos() < horizon:
			l.state = stateBusy
			b.add(l, deadlineFor(l.eo, d))
		}
		firstLapse = min(firstLapse, lapse) // however its extension fares
	})
	e.mu.Unlock()
	e.expire(lapsed, errLapsed)
	e.expire(expired, errMaxExtension)
	e.dispatch(b, false)
	e.closeSenders(func(k senderKey) bool { return k.src != nil && k.src.Closed() }, 0)
	// Dispatching must not push the next tick past the horizon, nor past
	// the first lease that would lapse.
	wait := next - time.Since(now)
	if firstLapse != math.MaxInt64 {
		wait = min(wait, time.Duration(firstLapse-time.Now().UnixNano()))
	}
	return max(wait, time.Millisecond)
}

// Why leases are dropped (the Err of their event.Expired).
var (
	errLapsed       = errors.New("flow: deadline passed without a confirmed extension; the server may redeliver")
	errMaxExtension = errors.New("flow: past the maximum extension; the server redelivers")
)

// expire drops leases marked stateDropping and reports why.
func (e *Extender) expire(ls []*lease, err error) {
	if len(ls) > 0 {
		e.drop(ls)
		e.emit(event.Event{Kind: event.Expired, Count: len(ls), Err: err})
	}
}

// drop settles leases marked stateDropping as Expired, outside the mutex
// (the settle path ends the lease), then removes them: settled first, so
// a stage waiting for the confirmation sees it settled and skips it.
func (e *Extender) drop(ls []*lease) {
	for _, l := range ls {
		message.Of(l.m).Settle(l.m, message.Expired, 0)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range ls {
		l.gone.Store(true)
		l.state = stateDropped
		l.endConfirm()
	}
}

// senderKey names a sender: its messages' source's acknowledger (nil:
// built by hand) and subscription.
type senderKey struct {
	src *ack.Acknowledger
	sub string
}

type groupKey struct {
	senderKey
	secs int32
	eo   bool
}

// group is one sender's modacks of one deadline: ids[i] is the ack id
// of leases[i] (a *lease).
type group struct {
	groupKey
	ids    []string
	leases []ack.Tag
}

// batcher groups leases by sender and deadline: nearly always one group.
type batcher map[groupKey]*group

func (b batcher) add(l *lease, d time.Duration) {
	k := groupKey{senderKey{message.Of(l.m).Acks, l.m.Subscription}, int32(d / time.Second), l.eo}
	g := b[k]
	if g == nil {
		g = &group{groupKey: k}
		b[k] = g
	}
	g.leases = append(g.leases, l)
	g.ids = append(g.ids, l.m.AckID)
}
