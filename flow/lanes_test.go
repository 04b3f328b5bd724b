package flow

import (
	"maps"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

// openAll opens lanes 1..n at once, from n goroutines, each with share
// (msgs, bytes), and returns the lanes granted and their grants.
func openAll(fc *FlowControl, n int, msgs, bytes int64) (lanes []int, grants []int64, refused int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for lane := 1; lane <= n; lane++ {
		wg.Go(func() {
			<-start
			m, _, ok := laneBudget{fc}.Open(lane, msgs, bytes, nil)
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				refused++
				return
			}
			lanes = append(lanes, lane)
			grants = append(grants, m)
		})
	}
	close(start)
	wg.Wait()
	return lanes, grants, refused
}

// TestOpenLaneConcurrent: streams opening at once get grants that
// together stay within the budget; a stream finds no room once they are
// spent, and a closed lane's grant is given out again, with a wake-up
// for those waiting. An unlimited budget opens any number of streams.
func TestOpenLaneConcurrent(t *testing.T) {
	fc := NewFlowControl(640, Unlimited)
	lanes, grants, refused := openAll(fc, 64, 10, 0)
	if len(lanes) != 64 || refused != 0 {
		t.Fatalf("64 concurrent opens: lanes %v, %d refused; want 64", lanes, refused)
	}
	var sum int64
	for _, g := range grants {
		sum += g
	}
	if sum != 640 {
		t.Fatalf("grants sum to %d, want the budget 640", sum)
	}
	if _, _, ok := (laneBudget{fc}).Open(65, 10, 0, nil); ok {
		t.Fatal("a 65th stream was granted room the others may still be sent")
	}
	wake := fc.Wake()
	laneBudget{fc}.Closed(lanes[17])
	select {
	case <-wake:
	default:
		t.Fatal("CloseLane woke nobody")
	}
	if m, _, ok := (laneBudget{fc}).Open(65, 10, 0, nil); !ok || m != 10 {
		t.Fatalf("after a close: grant %d ok %v; want 10", m, ok)
	}

	un := NewFlowControl(Unlimited, Unlimited)
	lanes, grants, refused = openAll(un, 300, 0, 0)
	if len(lanes) != 300 || refused != 0 {
		t.Fatalf("300 concurrent opens of an unlimited budget: %d lanes, %d refused; want 300 and 0", len(lanes), refused)
	}
	for _, g := range grants {
		if g != 0 {
			t.Fatalf("an unlimited budget granted %d, want 0 (unlimited on the wire)", g)
		}
	}
}

// TestOpenLaneAgainLowers: a source fused with several budgets asks each
// again with the least grant; the lane's grant drops to it, and the room
// it no longer claims goes to the next stream.
func TestOpenLaneAgainLowers(t *testing.T) {
	fc := NewFlowControl(100, Unlimited)
	if m, _, ok := (laneBudget{fc}).Open(1, 0, 0, nil); !ok || m != 100 {
		t.Fatalf("first stream: grant %d ok %v; want 100", m, ok)
	}
	if m, _, ok := (laneBudget{fc}).Open(1, 20, 0, nil); !ok || m != 20 {
		t.Fatalf("asked again with 20: grant %d ok %v; want 20", m, ok)
	}
	if m, _, ok := (laneBudget{fc}).Open(2, 0, 0, nil); !ok || m != 80 {
		t.Fatalf("second stream: grant %d ok %v; want the 80 the first no longer claims", m, ok)
	}
}

// receiveOn makes n messages bound to p and counts them on lane.
func receiveOn(fc *FlowControl, lane int, p *heldPath, n int) []*source.Message {
	ms := make([]*source.Message, n)
	for i := range ms {
		ms[i] = p.bind(newMsg(i, 10))
	}
	fc.receive(lane, ms)
	return ms
}

func doneAll(ms []*source.Message) {
	for _, m := range ms {
		message.Of(m).Done(m)
	}
}

// TestOpenLaneCountsServerHeld: a message settled but not Done (its ack
// not final) no longer holds a client permit but the server still counts
// it: a new stream is granted only the room the server has released, and
// only once half its share is free. A message of a closed stream that
// becomes Done later does not count against the stream that reuses its
// lane.
func TestOpenLaneCountsServerHeld(t *testing.T) {
	fc := NewFlowControl(10, Unlimited)
	gate := laneBudget{fc}
	var p heldPath
	const a = 1
	grant, _, ok := gate.Open(a, 0, 0, nil)
	if !ok || grant != 10 {
		t.Fatalf("first stream: grant %d ok %v; want the whole budget", grant, ok)
	}
	old := receiveOn(fc, a, &p, 10)
	if gate.Room(a) {
		t.Fatal("Room with the budget spent")
	}
	for _, m := range old {
		m.Ack()
	}
	if st := fc.Stats(); st.Outstanding != 0 || st.ServerHeld != 10 || !gate.Room(a) {
		t.Fatalf("acked, not final: %+v, Room %v; want 0 outstanding, 10 server-held, room", st, gate.Room(a))
	}
	if _, _, ok := gate.Open(2, 0, 0, nil); ok {
		t.Fatal("a stream opened while the server still counts the whole budget")
	}
	gate.Closed(a)
	if _, _, ok := gate.Open(2, 0, 0, nil); ok {
		t.Fatal("a stream opened after its predecessor closed, with every message still counted by the server")
	}
	doneAll(old[:4])
	if _, _, ok := gate.Open(2, 0, 0, nil); ok {
		t.Fatal("a stream opened with 4 of its share of 10 free (less than half)")
	}
	doneAll(old[4:5])
	const b = 2
	grant, _, ok = gate.Open(b, 0, 0, nil)
	if !ok || grant != 5 {
		t.Fatalf("half the budget free: grant %d ok %v; want 5", grant, ok)
	}
	fresh := receiveOn(fc, b, &p, 5)
	if _, _, ok := gate.Open(3, 0, 0, nil); ok {
		t.Fatal("a stream opened with the budget server-held")
	}
	doneAll(old[5:]) // the closed stream's last messages: not lane b's
	if st := fc.Stats(); st.ServerHeld != 5 || st.Outstanding != 5 {
		t.Fatalf("Stats = %+v; want 5 outstanding and server-held", st)
	}
	const c = 3
	grant, _, ok = gate.Open(c, 0, 0, nil)
	if !ok || grant != 5 {
		t.Fatalf("third stream: grant %d ok %v; want 5 (lane %d's 5 are still held)", grant, ok, b)
	}
	for _, m := range fresh {
		m.Nack()
	}
	doneAll(fresh)
	gate.Closed(b)
	gate.Closed(c)
	if st := fc.Stats(); st.ServerHeld != 0 || st.Outstanding != 0 || st.Acquired != 15 || st.Released != 15 {
		t.Fatalf("at the end: %+v", st)
	}
	if grant, _, ok := gate.Open(4, 0, 0, nil); !ok || grant != 10 {
		t.Fatalf("at the end: grant %d ok %v; want the whole budget", grant, ok)
	}
}

// laneModel is what the server may hold of a budget, kept by the test.
type laneModel struct {
	limit    int64
	fc       *FlowControl
	gate     laneBudget
	path     heldPath
	streams  map[int]*laneStream // open, by lane
	stream   map[*source.Message]*laneStream
	live     []*source.Message // unsettled
	settled  []*source.Message // settled, not Done
	nextID   int
	nextLane int
	waiting  map[int]bool // lanes refused, or revoked and closed, not given up
	revoked  map[int]bool // lanes whose revoke the budget called
}

type laneStream struct {
	lane    int
	grant   int64
	notDone int64
	open    bool
}

func (lm *laneModel) openLanes() []int { return slices.Sorted(maps.Keys(lm.streams)) }

func (lm *laneModel) waitingLanes() []int { return slices.Sorted(maps.Keys(lm.waiting)) }

// checkRevoked, after a refused open: every open lane granted more than
// the fair share of the open and waiting lanes (rounded up) is revoked.
func (lm *laneModel) checkRevoked(t *rapid.T) {
	n := int64(len(lm.streams) + len(lm.waiting))
	fair := (lm.limit + n - 1) / n
	for lane, s := range lm.streams {
		if s.grant > fair && !lm.revoked[lane] {
			t.Fatalf("lane %d granted %d, above the fair share %d of %d lanes, with %v waiting: not revoked", lane, s.grant, fair, n, lm.waitingLanes())
		}
	}
}

// check: the counts are exact, and what the server may still hold (every
// message not Done, plus what the open streams may still be sent under
// their grants) never exceeds the budget.
func (lm *laneModel) check(t *rapid.T) {
	st := lm.fc.Stats()
	notDone := int64(len(lm.live) + len(lm.settled))
	if st.Outstanding != int64(len(lm.live)) || st.ServerHeld != notDone {
		t.Fatalf("Stats %+v; want %d outstanding, %d server-held", st, len(lm.live), notDone)
	}
	potential := notDone
	for _, s := range lm.streams {
		potential += max(s.grant-s.notDone, 0)
	}
	if potential > lm.limit {
		t.Fatalf("the server may hold %d messages (%d not done, streams %v); budget %d", potential, notDone, lm.openLanes(), lm.limit)
	}
	if room := int64(len(lm.live)) < lm.limit; lm.fc.Room() != room {
		t.Fatalf("Room %v with %d outstanding of %d", lm.fc.Room(), len(lm.live), lm.limit)
	}
}

// pick draws one element of s, or skips the action (for the reason none)
// when s is empty: the action's precondition.
func pick[T any](t *rapid.T, s []T, label, none string) (int, T) {
	if len(s) == 0 {
		t.Skip(none)
	}
	i := rapid.IntRange(0, len(s)-1).Draw(t, label)
	return i, s[i]
}

// TestLaneGrantsProperty: random streams open (with random shares, new
// lanes or lanes waiting again), receive up to their grants, settle,
// finish (Done), close and give up in any order, on one budget: counts
// stay exact, the server is never granted room it still counts, and a
// refused lane has every lane above the fair share revoked.
func TestLaneGrantsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.Int64Range(1, 30).Draw(rt, "limit")
		fc := NewFlowControl(limit, Unlimited)
		lm := &laneModel{limit: limit, fc: fc, gate: laneBudget{fc}, streams: map[int]*laneStream{}, stream: map[*source.Message]*laneStream{}, waiting: map[int]bool{}, revoked: map[int]bool{}}
		rt.Repeat(map[string]func(*rapid.T){
			"open": func(t *rapid.T) {
				share := rapid.Int64Range(0, limit+2).Draw(t, "share")
				lane := lm.nextLane + 1
				if waiting := lm.waitingLanes(); len(waiting) > 0 && rapid.Bool().Draw(t, "retry") {
					_, lane = pick(t, waiting, "waiting lane", "none waiting")
				} else {
					lm.nextLane++
				}
				grant, _, ok := lm.gate.Open(lane, share, 0, func() { lm.revoked[lane] = true })
				if !ok {
					lm.waiting[lane] = true
					lm.checkRevoked(t)
					return
				}
				if want := share; want > 0 && want <= limit && grant > want {
					t.Fatalf("granted %d above the share %d", grant, want)
				}
				others := len(lm.waiting)
				if lm.waiting[lane] {
					others--
				}
				if n := int64(len(lm.streams) + others + 1); others > 0 && grant > (limit+n-1)/n {
					t.Fatalf("granted %d with %d others waiting, above the fair share of %d lanes", grant, others, n)
				}
				delete(lm.waiting, lane)
				lm.revoked[lane] = false
				lm.streams[lane] = &laneStream{lane: lane, grant: grant, open: true}
			},
			"give up": func(t *rapid.T) {
				_, lane := pick(t, lm.waitingLanes(), "lane", "none waiting")
				lm.gate.Closed(lane)
				delete(lm.waiting, lane)
			},
			"receive": func(t *rapid.T) {
				_, lane := pick(t, lm.openLanes(), "lane", "no stream")
				s := lm.streams[lane]
				if s.notDone >= s.grant {
					t.Skip("the server keeps to the grant")
				}
				n := rapid.Int64Range(1, s.grant-s.notDone).Draw(t, "n")
				ms := make([]*source.Message, n)
				for i := range ms {
					lm.nextID++
					ms[i] = lm.path.bind(newMsg(lm.nextID, 1))
					lm.stream[ms[i]] = s
				}
				fc.receive(lane, ms)
				s.notDone += n
				lm.live = append(lm.live, ms...)
			},
			"settle": func(t *rapid.T) {
				i, m := pick(t, lm.live, "message", "none live")
				o := rapid.SampledFrom([]uint32{message.Ack, message.Nack, message.NackAfter, message.NoOp, message.Expired}).Draw(t, "outcome")
				if !message.Of(m).Settle(m, o, 0) {
					t.Fatal("an unsettled message refused its outcome")
				}
				lm.live = slices.Delete(lm.live, i, i+1)
				lm.settled = append(lm.settled, m)
			},
			"done": func(t *rapid.T) {
				i, m := pick(t, lm.settled, "message", "none settled")
				message.Of(m).Done(m)
				lm.settled = slices.Delete(lm.settled, i, i+1)
				lm.stream[m].notDone--
				delete(lm.stream, m)
			},
			"close": func(t *rapid.T) {
				_, lane := pick(t, lm.openLanes(), "lane", "no stream")
				lm.gate.Closed(lane)
				lm.streams[lane].open = false
				delete(lm.streams, lane)
				if lm.revoked[lane] {
					lm.waiting[lane] = true // its source opens it again
				}
			},
			"": lm.check,
		})
	})
}

// TestOverGrantCountsOnlyUnsettled: a server may release a message as soon
// as it applies its ack, before the client hears the ack is final, and
// send the next one within its grant: that is no over-grant. A message
// received while the lane's grant is all unsettled is one, counted and
// reported first once.
func TestOverGrantCountsOnlyUnsettled(t *testing.T) {
	fc := NewFlowControl(10, Unlimited)
	var p heldPath
	const lane = 1
	grant, _, ok := laneBudget{fc}.Open(lane, 2, 0, nil)
	if !ok || grant != 2 {
		t.Fatalf("grant %d ok %v; want 2", grant, ok)
	}
	for _, m := range receiveOn(fc, lane, &p, 2) {
		m.Ack() // settled; its ack is not final yet
	}
	if over, _ := fc.receive(lane, []*source.Message{p.bind(newMsg(3, 10)), p.bind(newMsg(4, 10))}); over != 0 {
		t.Fatalf("the grant's worth sent after two acks: over %d, want 0", over)
	}
	over, first := fc.receive(lane, []*source.Message{p.bind(newMsg(5, 10))})
	if over != 1 || !first || fc.Stats().OverGrant != 1 {
		t.Fatalf("a third unsettled message on a grant of 2: over %d first %v, %+v", over, first, fc.Stats())
	}
	if over, first := fc.receive(lane, []*source.Message{p.bind(newMsg(6, 10))}); over != 1 || first {
		t.Fatalf("the next one: over %d first %v; want 1, false", over, first)
	}
}
