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

// loop is the extender's one scheduling goroutine: it flushes receipt
// modacks shortly after track queued them, and on every tick extends the
// leases that are due and drops those lapsed or past the maximum
// extension. It never waits for an RPC: modacks are queued with their
// subscription's sender.
func (e *Extender) loop() {
	defer close(e.loopDone)
	d := e.nextTick()
	tick := time.NewTimer(d)
	tickAt := time.Now().Add(d)
	defer tick.Stop()
	// pullTick brings the next tick forward when the deadline has dropped
	// since it was scheduled: a lease granted the new, shorter deadline must
	// be extended before it lapses, not at the old deadline's pace.
	pullTick := func() {
		if d := e.nextTick(); time.Now().Add(d).Before(tickAt) {
			tick.Reset(d)
			tickAt = time.Now().Add(d)
		}
	}
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	armed := false
	for {
		select {
		case <-e.quit:
			return
		case <-e.wake:
			if e.pendingLen() >= ackids.MaxIDs {
				e.flushReceipts()
				pullTick()
			} else if !armed {
				flush.Reset(receiptFlushDelay)
				armed = true
			}
		case <-flush.C:
			armed = false
			e.flushReceipts()
			pullTick()
		case <-tick.C:
			d := e.tick()
			tick.Reset(d)
			tickAt = time.Now().Add(d)
		}
	}
}

// nextTick is the jittered delay to the next tick under the current
// deadline.
func (e *Extender) nextTick() time.Duration {
	e.mu.Lock()
	iv := e.policy.interval()
	e.mu.Unlock()
	return jittered(iv)
}

func jittered(d time.Duration) time.Duration {
	f := 1 - jitter + 2*jitter*rand.Float64()
	return max(time.Duration(float64(d)*f), time.Millisecond)
}

func (e *Extender) pendingLen() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.pending {
		n += len(s)
	}
	return n
}

// flushReceipts sends the queued receipt modacks, grouped by subscription
// and deadline.
func (e *Extender) flushReceipts() {
	e.mu.Lock()
	d := e.policy.deadline()
	n := 0
	for _, s := range e.pending {
		n += len(s)
	}
	b := batcher{size: n}
	for _, s := range e.pending {
		for i := range s {
			// Skip leases released since track queued them.
			if l := &s[i]; l.e != nil && !l.gone.Load() && l.state == stateReceipt {
				b.add(l, e.deadlineFor(l, d))
			}
		}
	}
	clear(e.pending)
	e.pending = e.pending[:0]
	e.mu.Unlock()
	e.dispatch(b.jobs(true))
}

// tick extends the leases that would expire before the next tick plus the
// margin, drops the ones past the maximum extension, and returns the delay
// to the next tick.
//
// It scans every lease under the mutex (and drops the batches whose
// leases are all gone). That is O(leases) per tick, and ticks come every
// quarter deadline (≥ 2.5 s by default): see BenchmarkTickScan for the
// cost (about 0.2 ms for 10,000 leases on one core of a 2-core AMD EPYC
// VM).
func (e *Extender) tick() time.Duration {
	now := time.Now()
	e.mu.Lock()
	d := e.policy.deadline()
	next := jittered(e.policy.interval())
	ts := tickScan{
		nowNs:      now.UnixNano(),
		maxExt:     int64(e.cfg.MaxExtension),
		d:          d,
		firstLapse: math.MaxInt64,
	}
	ts.horizon = ts.nowNs + int64(next+e.margin(d))
	e.scanLocked(&ts)
	e.mu.Unlock()
	e.expire(ts.lapsed, errLapsed)
	e.expire(ts.expired, errMaxExtension)
	e.dispatch(ts.b.jobs(false))
	e.report()
	e.pruneSenders()
	// The horizon assumed the next tick at now+next; dispatching must not
	// push it later, nor past the first lease that would lapse.
	wait := next - time.Since(now)
	if ts.firstLapse != math.MaxInt64 {
		wait = min(wait, time.Duration(ts.firstLapse-time.Now().UnixNano()))
	}
	return max(wait, time.Millisecond)
}

// tickScan is one tick's pass over the lease table: the clock and limits
// it judges by, and what it found to extend, to drop and when the first
// kept lease lapses.
type tickScan struct {
	nowNs   int64         // the tick's time
	horizon int64         // extend what expires before this
	maxExt  int64         // MaxExtension in ns; 0 means none
	d       time.Duration // the deadline extensions ask for

	b               batcher // the extensions, by subscription and deadline
	expired, lapsed []*lease
	firstLapse      int64 // math.MaxInt64 when no lease is kept
}

// scanLocked decides every live lease's fate for the tick (lapsed, past
// the maximum extension, due for extension, or left) into ts, and drops
// the slabs whose leases are all gone. e.mu must be held.
func (e *Extender) scanLocked(ts *tickScan) {
	kept := e.slabs[:0]
	for _, s := range e.slabs {
		live := false
		for i := range s {
			l := &s[i]
			if l.e == nil || l.gone.Load() {
				continue
			}
			live = true
			if l.state == stateDropping {
				continue
			}
			if ts.nowNs >= l.lapse {
				// Its deadline passed without a confirmed extension (failed
				// modacks, a stalled client, a paused process): the server
				// may have given it out again.
				l.state = stateDropping
				ts.lapsed = append(ts.lapsed, l)
				continue
			}
			if ts.maxExt > 0 && ts.nowNs-l.received >= ts.maxExt {
				l.state = stateDropping
				ts.expired = append(ts.expired, l)
				continue
			}
			if l.state == stateIdle && l.expiry < ts.horizon {
				l.state = stateBusy
				ts.b.add(l, e.deadlineFor(l, ts.d))
			}
			// The next tick comes no later than this lease would lapse,
			// however its extension fares.
			ts.firstLapse = min(ts.firstLapse, l.lapse)
		}
		if live {
			kept = append(kept, s)
		}
	}
	clear(e.slabs[len(kept):])
	e.slabs = kept
	e.trimAt = max(2*len(kept), 16)
	e.trimmed = ts.nowNs
}

// Why leases are dropped (the Err of their event.Expired).
var (
	errLapsed       = errors.New("flow: deadline passed without a confirmed extension; the server may redeliver")
	errMaxExtension = errors.New("flow: past the maximum extension; the server redelivers")
)

// expire settles leases the extender dropped as Expired, outside the mutex
// since the settle path ends the lease, and reports why (err).
func (e *Extender) expire(ls []*lease, err error) {
	if len(ls) == 0 {
		return
	}
	e.drop(ls)
	e.emit(event.Event{Kind: event.Expired, Count: len(ls), Err: err})
}

// drop settles leases marked stateDropping as message.Expired and then
// removes them. The order matters: the message is settled before its
// exactly-once confirmation channel closes and before Confirmed stops
// returning it, so a stage waiting to hand it on sees it settled and skips
// it rather than handing it on unconfirmed. The settle path usually
// releases the lease itself; removing it here covers unbound messages.
func (e *Extender) drop(ls []*lease) {
	for _, l := range ls {
		message.Of(l.m).Settle(l.m, message.Expired, 0)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range ls {
		e.removeLocked(l)
	}
}

// batcher groups leases into requests by source, subscription and
// deadline.
// There are few groups (nearly always one: one subscription, one
// deadline), so they are found by a linear search from the last one used;
// the first group's slices are sized once.
type batcher struct {
	size  int // leases expected in all (a capacity hint)
	last  *group
	order []*group
}

type groupKey struct {
	src  *ack.Acknowledger // the messages' source's: modacks go out on its client
	sub  string
	secs int32
}

type group struct {
	key    groupKey
	leases []ack.Tag // *lease
	ids    []string
}

func (b *batcher) add(l *lease, d time.Duration) {
	gk := groupKey{src: message.Of(l.m).Acks, sub: l.m.Subscription, secs: int32(d / time.Second)}
	g := b.last
	if g == nil || g.key != gk {
		g = nil
		for _, o := range b.order {
			if o.key == gk {
				g = o
				break
			}
		}
		if g == nil {
			g = &group{key: gk}
			if len(b.order) == 0 && b.size > 0 {
				g.leases = make([]ack.Tag, 0, b.size)
				g.ids = make([]string, 0, b.size)
			}
			b.order = append(b.order, g)
		}
		b.last = g
	}
	g.leases = append(g.leases, l)
	g.ids = append(g.ids, l.m.AckID)
}

// jobs splits every group at 1000 ack ids and 512 KiB encoded.
func (b *batcher) jobs(receipt bool) []job {
	var out []job
	for _, g := range b.order {
		gk := g.key
		off := 0
		ackids.Split(g.ids, 0, 0, func(chunk []string) {
			out = append(out, job{
				src:     gk.src,
				sub:     gk.sub,
				secs:    gk.secs,
				ids:     chunk,
				leases:  g.leases[off : off+len(chunk)],
				receipt: receipt,
			})
			off += len(chunk)
		})
	}
	return out
}
