package proptest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/stage"
)

// eagerChecks is the CI default of TestEagerProperties' cases.
const eagerChecks = 300

// TestEagerProperties drives one stage.Eager with random upstream offers,
// downstream takes, Room and Admit budgets, Discard, upstream close and
// cancellation, in a synctest bubble, and checks after every step:
//   - on receipt (invariant 1): every element the stage took from upstream
//     has had OnReceive by the time the stage blocks, except the one
//     element waiting for admission while Admit says no;
//   - bounded (invariant 4): buffered plus waiting never exceed Bound, and
//     Observe never reports more;
//   - nothing lost or duplicated: emitted in receipt order, each element
//     emitted or dropped once, dropped only on Discard or cancellation;
//   - Room: no receive once Room says no (but the one the stage had
//     already committed to).
func TestEagerProperties(t *testing.T) {
	check(t, eagerChecks, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			e := newEagerModel(rt)
			defer e.teardown()
			rt.Repeat(map[string]func(*rapid.T){
				"":          e.check,
				"Offer":     e.offer,
				"Take":      e.take,
				"SetRoom":   e.setRoom,
				"AddBudget": e.addBudget,
				"End":       e.end,
			})
			e.finish(rt)
		})
	})
}

type eagerModel struct {
	bound              int
	useRoom, useAdmit  bool
	stg                *stage.Eager[int]
	g                  *stage.Group
	stop               context.CancelFunc
	out                <-chan int
	quota              chan int // producer: >0 send one more, -1 close
	producerDone       chan struct{}
	offered            int // quotas given
	closedIn, canceled bool
	discarded          bool
	discardCh          chan struct{}
	outClosed          bool

	mu          sync.Mutex // guards the fields below; never held while waiting
	room        bool
	budget      int
	wake        chan struct{}
	sent        int // elements the stage took from upstream
	received    []int
	receivedSet map[int]bool
	dropped     map[int]bool
	emitted     []int
	maxObserved int
	// sentWhenRoomOff is sent when Room last turned false (-1: Room is on).
	sentWhenRoomOff int
}

func newEagerModel(t *rapid.T) *eagerModel {
	bound := rapid.IntRange(1, 6).Draw(t, "bound")
	useRoom := rapid.Bool().Draw(t, "useRoom")
	useAdmit := rapid.Bool().Draw(t, "useAdmit")
	return newEagerModelWith(bound, useRoom, useAdmit, rapid.IntRange(0, 5).Draw(t, "budget"))
}

func newEagerModelWith(bound int, useRoom, useAdmit bool, budget int) *eagerModel {
	e := &eagerModel{
		bound:           bound,
		useRoom:         useRoom,
		useAdmit:        useAdmit,
		quota:           make(chan int, 1000),
		producerDone:    make(chan struct{}),
		discardCh:       make(chan struct{}),
		room:            true,
		wake:            make(chan struct{}),
		receivedSet:     map[int]bool{},
		dropped:         map[int]bool{},
		sentWhenRoomOff: -1,
	}
	e.budget = budget
	e.stg = &stage.Eager[int]{
		Bound: e.bound,
		OnReceive: func(_ context.Context, v int) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.received = append(e.received, v)
			e.receivedSet[v] = true
			return nil
		},
		OnDrop: func(v int) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.dropped[v] = true
		},
		Discard: e.discardCh,
		Observe: func(n int) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.maxObserved = max(e.maxObserved, n)
		},
	}
	if e.useRoom || e.useAdmit {
		e.stg.Wake = func() <-chan struct{} {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.wake
		}
	}
	if e.useRoom {
		e.stg.Room = func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.room
		}
	}
	if e.useAdmit {
		e.stg.Admit = func(int) bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.budget == 0 {
				return false
			}
			e.budget--
			return true
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.g = stage.NewGroup(ctx)
	in := make(chan int)
	e.out = e.stg.Run(e.g, in)
	go e.produce(ctx, in)
	return e
}

// produce sends 0, 1, 2, … to the stage, one per quota, in order.
func (e *eagerModel) produce(ctx context.Context, in chan<- int) {
	defer close(e.producerDone)
	next := 0
	for q := range e.quota {
		if q < 0 {
			close(in)
			return
		}
		select {
		case in <- next:
			e.mu.Lock()
			e.sent++
			e.mu.Unlock()
			next++
		case <-ctx.Done():
			return
		}
	}
}

// signal wakes the stage after a change of Room or Admit's budget.
func (e *eagerModel) signalLocked() {
	close(e.wake)
	e.wake = make(chan struct{})
}

func (e *eagerModel) offer(t *rapid.T) { e.doOffer(rapid.IntRange(1, 5).Draw(t, "n")) }

func (e *eagerModel) doOffer(n int) {
	if e.closedIn {
		return
	}
	for range n {
		e.quota <- 1
	}
	e.offered += n
	synctest.Wait()
}

func (e *eagerModel) take(t *rapid.T) {
	n := rapid.IntRange(1, 5).Draw(t, "n")
	for range n {
		synctest.Wait()
		select {
		case v, ok := <-e.out:
			if !ok {
				e.outClosed = true
				return
			}
			e.mu.Lock()
			received := e.receivedSet[v]
			e.emitted = append(e.emitted, v)
			e.mu.Unlock()
			if !received {
				t.Fatalf("invariant 1: element %d emitted before its OnReceive ran", v)
			}
		default:
			return // nothing offered now
		}
	}
	synctest.Wait()
}

func (e *eagerModel) setRoom(t *rapid.T) {
	on := rapid.Bool().Draw(t, "room")
	if !e.useRoom {
		return
	}
	e.mu.Lock()
	if e.room && !on {
		e.sentWhenRoomOff = e.sent
	}
	if on {
		e.sentWhenRoomOff = -1
	}
	e.room = on
	e.signalLocked()
	e.mu.Unlock()
	synctest.Wait()
}

func (e *eagerModel) addBudget(t *rapid.T) {
	n := rapid.IntRange(1, 5).Draw(t, "n")
	e.mu.Lock()
	e.budget += n
	e.signalLocked()
	e.mu.Unlock()
	synctest.Wait()
}

// end is, now and then (so that most cases reach full buffers first),
// one of the ways a stage stops emitting: Discard, upstream closing, or
// cancellation.
func (e *eagerModel) end(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "now") != 0 {
		return
	}
	switch rapid.IntRange(0, 2).Draw(t, "how") {
	case 0:
		e.discard(t)
	case 1:
		e.closeInput(t)
	default:
		e.cancel(t)
	}
}

func (e *eagerModel) discard(*rapid.T) {
	if e.discarded {
		return
	}
	e.discarded = true
	close(e.discardCh)
	synctest.Wait()
}

func (e *eagerModel) closeInput(*rapid.T) {
	if e.closedIn {
		return
	}
	e.closedIn = true
	e.quota <- -1
	synctest.Wait()
}

func (e *eagerModel) cancel(*rapid.T) {
	e.canceled = true
	e.stop()
	synctest.Wait()
}

func (e *eagerModel) check(t *rapid.T) {
	synctest.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	notReceived := e.sent - len(e.received)
	for v := range e.dropped {
		if !e.receivedSet[v] {
			notReceived-- // dropped on arrival while discarding
		}
	}
	// The one element that may wait for admission, not yet received.
	waiting := 0
	if e.useAdmit && !e.canceled && !e.discarded {
		waiting = 1
	}
	if notReceived < 0 || notReceived > waiting {
		t.Fatalf("invariant 1: %d elements taken from upstream, %d had OnReceive, %d dropped on arrival (admission budget %d)",
			e.sent, len(e.received), e.sent-len(e.received)-notReceived, e.budget)
	}
	if notReceived == 1 && e.budget > 0 {
		t.Fatalf("invariant 1: an element waits for admission although the budget is %d", e.budget)
	}
	held := len(e.received) - len(e.emitted)
	for v := range e.dropped {
		if e.receivedSet[v] {
			held--
		}
	}
	if held+notReceived > e.bound {
		t.Fatalf("invariant 4: the stage holds %d buffered + %d waiting, bound %d", held, notReceived, e.bound)
	}
	if e.maxObserved > e.bound {
		t.Fatalf("invariant 4: Observe reported %d buffered, bound %d", e.maxObserved, e.bound)
	}
	if !slices.IsSorted(e.emitted) || len(slices.Compact(slices.Clone(e.emitted))) != len(e.emitted) {
		t.Fatalf("emitted out of order or twice: %v", e.emitted)
	}
	for _, v := range e.emitted {
		if e.dropped[v] {
			t.Fatalf("element %d both emitted and dropped", v)
		}
	}
	if len(e.dropped) > 0 && !e.discarded && !e.canceled {
		t.Fatalf("%d elements dropped without Discard or cancellation", len(e.dropped))
	}
	if (e.discarded || e.canceled) && (held > 0 || notReceived > 0) {
		t.Fatalf("after Discard or cancellation the stage still holds %d (+%d waiting)", held, notReceived)
	}
	if e.useRoom && e.sentWhenRoomOff >= 0 && !e.discarded && e.sent > e.sentWhenRoomOff+1 {
		t.Fatalf("received %d elements after Room turned false (at most the one already committed to)", e.sent-e.sentWhenRoomOff)
	}
}

// finish ends the stage (cancel) and checks conservation: every element
// taken from upstream was emitted or dropped, exactly once.
func (e *eagerModel) finish(t *rapid.T) {
	e.cancel(t)
	if err := e.g.Wait(); err != nil && err != context.Canceled {
		t.Fatalf("stage: %v", err)
	}
	for range e.out {
		t.Fatal("an element emitted after cancellation")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if got := len(e.emitted) + len(e.dropped); got != e.sent {
		t.Fatalf("%d taken from upstream, %d emitted + %d dropped", e.sent, len(e.emitted), len(e.dropped))
	}
}

func (e *eagerModel) teardown() {
	e.stop()
	close(e.quota)
	<-e.producerDone
	_ = e.g.Wait()
}
