package operators

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pubsubflow/pubsubflow/stage"
)

// Defaults of BatchOptions. Size and Wait are the usual batcher defaults
// (Broadway's batch_size and batch_timeout); MaxOpen matches
// stage.DefaultBound.
const (
	DefaultBatchSize  = 100
	DefaultBatchWait  = time.Second
	defaultMaxOpen    = 1000
	defaultMaxWaiting = 16
)

// BatchOptions configure Batch. The zero value collects up to 100
// elements into one batch, and no element waits more than a second.
type BatchOptions[T any] struct {
	// Size is the most elements in a batch: a batch that reaches it is
	// emitted. Zero means DefaultBatchSize.
	Size int
	// Bytes, if set, is the most bytes in a batch as SizeOf counts them: an
	// element that would take a batch past Bytes starts the next one, and
	// a batch that reaches Bytes is emitted. An element larger than Bytes
	// goes alone. Zero means no byte limit.
	Bytes int
	// SizeOf is an element's size in bytes (required with Bytes). A
	// negative size fails the stage.
	SizeOf func(T) int
	// Wait is the longest the oldest element of a batch waits for the
	// batch to fill: then the batch is emitted, full or not. Zero means
	// DefaultBatchWait.
	Wait time.Duration
	// Idle, if set, is how upstream says it has no more to give for now:
	// it is asked whenever the input has nothing ready (and nothing can be
	// handed downstream at that moment), with the number of elements the
	// stage has received so far, and true emits every open batch at once
	// instead of letting it wait out Wait. Passing the count lets upstream
	// answer exactly: "everything I sent has arrived, and nothing more is
	// coming until something is settled" (a Subscriber's RunBatches
	// answers true when its flow budget is spent and all it received was
	// handed on). It must not block. An answer that turns true without a
	// new element is seen at the next element, release or timer.
	Idle func(received uint64) bool
	// Key, if set, keeps one open batch per key: a batch holds elements of
	// one key only, in input order. Nil means one key for all.
	Key func(T) string
	// MaxOpen bounds the open batches (distinct keys being collected);
	// when a new key needs one and MaxOpen are open, the oldest is emitted
	// first. Zero means 1000.
	MaxOpen int
	// MaxWaiting bounds the closed batches waiting to be emitted (for
	// downstream to take them, or, in Ordered mode, for their key's
	// previous batch to be released): while that many wait the stage does
	// not receive. One input chunk (RunBatches), and batches closed by
	// Wait, Idle or MaxOpen, which hold no new elements, may take it past
	// the bound until they are emitted. Zero means 16.
	MaxWaiting int
	// Ordered emits a key's next batch only after the previous one was
	// released with Batcher.Release: at most one batch per key is in
	// flight downstream, so batches of one key are processed in order and
	// never overlap. While its key's batch is in flight, a key's open
	// batch keeps filling and is closed only by Size, Bytes or MaxOpen; it
	// is emitted as soon as the key is released. In Ordered mode the stage
	// finishes only once every batch was emitted, so release every batch.
	Ordered bool
	// OrderedKey, if set, limits Ordered to the keys it reports true: the
	// batches of the other keys go as they close, as without Ordered, and
	// Release ignores them. Release calls Key and OrderedKey on a batch's
	// first element, from its own goroutine.
	OrderedKey func(key string) bool
}

// Validate reports a bad option, naming it.
func (o BatchOptions[T]) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("operators: BatchOptions.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if o.Size < 0 {
		bad("Size", "%d: want ≥ 1 (0 = default %d)", o.Size, DefaultBatchSize)
	}
	if o.Bytes < 0 {
		bad("Bytes", "%d: want ≥ 1 (0 = no byte limit)", o.Bytes)
	}
	if o.Bytes > 0 && o.SizeOf == nil {
		bad("SizeOf", "nil: Bytes %d needs SizeOf to count bytes", o.Bytes)
	}
	if o.Wait < 0 {
		bad("Wait", "%v: want > 0 (0 = default %v)", o.Wait, DefaultBatchWait)
	}
	if o.MaxOpen < 0 {
		bad("MaxOpen", "%d: want ≥ 1 (0 = default %d)", o.MaxOpen, defaultMaxOpen)
	}
	if o.MaxWaiting < 0 {
		bad("MaxWaiting", "%d: want ≥ 1 (0 = default %d)", o.MaxWaiting, defaultMaxWaiting)
	}
	return errors.Join(errs...)
}

func (o BatchOptions[T]) withDefaults() BatchOptions[T] {
	if o.Size == 0 {
		o.Size = DefaultBatchSize
	}
	if o.Wait == 0 {
		o.Wait = DefaultBatchWait
	}
	if o.MaxOpen == 0 {
		o.MaxOpen = defaultMaxOpen
	}
	if o.MaxWaiting == 0 {
		o.MaxWaiting = defaultMaxWaiting
	}
	return o
}

// Batcher is the Batch operator: a stage.Flow[T, []T]. It runs one
// goroutine per run and does every send and receive in a select on its
// group's context; cancelled, it drops what it holds (a Subscriber's
// pipeline nacks such messages when it stops). It holds at most MaxOpen
// open batches and MaxOpen + MaxWaiting + 2 closed ones (plus one input
// chunk's worth with RunBatches), each of at most Size elements and Bytes
// bytes (or one larger element).
type Batcher[T any] struct {
	opt BatchOptions[T]
	err error

	mu  sync.Mutex
	run *batchRun[T] // the running Ordered run, for Release

	// observe, if set (tests), is called on the stage's goroutine after
	// every step with the open batches and the closed batches waiting.
	observe func(open, waiting int)
}

// Batch returns a flow that groups its input into batches. A batch is
// emitted when it reaches Size elements or Bytes bytes, when its oldest
// element has waited Wait, when Idle says upstream has no more for now,
// or when MaxOpen open batches are reached and it is the oldest; the input
// ending emits what is left. Bad options fail the stage's group with an
// error naming them (Validate reports them beforehand).
func Batch[T any](opt BatchOptions[T]) *Batcher[T] {
	return &Batcher[T]{opt: opt.withDefaults(), err: opt.Validate()}
}

// The chunked path lets a batch source (a Subscriber's) feed Batch with one
// channel operation per chunk; keep it compiled in.
var _ stage.BatchFlow[int, []int] = (*Batcher[int])(nil)

// Run starts the stage's goroutine under g and returns its output.
func (b *Batcher[T]) Run(g *stage.Group, in <-chan T) <-chan []T {
	out := make(chan []T)
	b.start(g, func(ctx context.Context, r *batchRun[T]) error {
		defer close(out)
		if r == nil {
			return nil
		}
		r.in1, r.out1 = in, out
		return r.loop(ctx)
	})
	return out
}

// RunBatches is Run for an input that arrives in chunks (a Subscriber's
// source hands on messages so): the same batches, one channel operation
// per chunk in. Each chunk it hands on holds one batch, so that parallel
// consumers share the batches.
func (b *Batcher[T]) RunBatches(g *stage.Group, in <-chan []T) <-chan [][]T {
	out := make(chan [][]T)
	b.start(g, func(ctx context.Context, r *batchRun[T]) error {
		defer close(out)
		if r == nil {
			return nil
		}
		r.inN, r.outN = in, out
		return r.loop(ctx)
	})
	return out
}

func (b *Batcher[T]) start(g *stage.Group, loop func(context.Context, *batchRun[T]) error) {
	r := newBatchRun(b)
	err := b.err
	if err == nil && b.opt.Ordered {
		b.mu.Lock()
		if b.run != nil {
			err = errors.New("operators: a Batch in Ordered mode runs once at a time (Release must know the run): make one Batch per pipeline")
		} else {
			b.run = r
		}
		b.mu.Unlock()
	}
	g.Go(func(ctx context.Context) error {
		if b.opt.Ordered && err == nil {
			defer func() {
				b.mu.Lock()
				b.run = nil
				b.mu.Unlock()
			}()
		}
		if err != nil {
			_ = loop(ctx, nil) // closes the output
			return err
		}
		return loop(ctx, r)
	})
}

// Release tells an Ordered Batch that batch, as it was emitted, has been
// settled downstream: its key's next batch may go. It never blocks, may
// be called from any goroutine, and ignores a batch it does not know (not
// Ordered, released already, or emitted by a run that has ended).
func (b *Batcher[T]) Release(batch []T) {
	if !b.opt.Ordered || len(batch) == 0 || !b.orderedKey(b.keyOf(batch[0])) {
		return
	}
	b.mu.Lock()
	r := b.run
	if r != nil {
		r.released = append(r.released, &batch[0])
	}
	b.mu.Unlock()
	if r != nil {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// keyOf is v's key (one key for all without Key).
func (b *Batcher[T]) keyOf(v T) string {
	if b.opt.Key == nil {
		return ""
	}
	return b.opt.Key(v)
}

// orderedKey reports whether Ordered holds for key's batches.
func (b *Batcher[T]) orderedKey(key string) bool {
	return b.opt.Ordered && (b.opt.OrderedKey == nil || b.opt.OrderedKey(key))
}

// keyState is one key's batches: the open one, and in Ordered mode
// whether one is ready or in flight (owed) and the closed ones waiting
// behind it.
type keyState[T any] struct {
	key     string
	open    *openBatch[T]
	owed    bool
	backlog [][]T
}

type openBatch[T any] struct {
	ks    *keyState[T]
	items []T
	bytes int
	first time.Time
	at    *list.Element // in aging or owing
	in    *list.List
}

type readyBatch[T any] struct {
	ks    *keyState[T]
	items []T
}

// batchRun is one run's state, owned by its goroutine (released is shared
// with Release, under the Batcher's mutex).
type batchRun[T any] struct {
	b   *Batcher[T]
	opt BatchOptions[T]

	in1  <-chan T
	inN  <-chan []T
	out1 chan<- []T
	outN chan<- [][]T

	keys map[string]*keyState[T]
	// aging holds the open batches that Wait and Idle close (oldest
	// first); owing, in Ordered mode, those of keys with a batch ready or
	// in flight, which only Size, Bytes, MaxOpen and the key's release
	// close.
	aging, owing list.List
	open         int
	ready        *stage.Ring[readyBatch[T]]
	waiting      int // ready plus backlogs
	inFlight     map[*T]*keyState[T]
	received     uint64
	chunk        [][]T // the head of ready as RunBatches hands it on

	timer    *time.Timer
	armedFor *openBatch[T]

	released []*T // guarded by b.mu
	wake     chan struct{}
}

func newBatchRun[T any](b *Batcher[T]) *batchRun[T] {
	r := &batchRun[T]{
		b:     b,
		opt:   b.opt,
		keys:  map[string]*keyState[T]{},
		ready: stage.NewRing[readyBatch[T]](4),
		wake:  make(chan struct{}, 1),
	}
	if b.opt.Ordered {
		r.inFlight = map[*T]*keyState[T]{}
	}
	return r
}

// batchPass is what one pass of the loop may do: nil channels are
// disabled arms; head (Run) or chunk (RunBatches) is what a send emits.
type batchPass[T any] struct {
	in1    <-chan T
	inN    <-chan []T
	out1   chan<- []T
	outN   chan<- [][]T
	head   []T
	chunk  [][]T
	timerC <-chan time.Time
}

func (r *batchRun[T]) loop(ctx context.Context) error {
	r.timer = time.NewTimer(time.Hour)
	r.timer.Stop()
	defer r.timer.Stop()
	for {
		r.takeReleases()
		if r.b.observe != nil {
			r.b.observe(r.open, r.waiting)
		}
		if r.in1 == nil && r.inN == nil && r.open == 0 && r.waiting == 0 {
			return nil
		}
		var p batchPass[T]
		r.pass(&p)

		// First without waiting: Idle is asked only when the input has
		// nothing ready and downstream takes nothing now.
		var err error
		select {
		case v, ok := <-p.in1:
			err = r.got1(v, ok)
		case vs, ok := <-p.inN:
			err = r.gotN(vs, ok)
		case p.out1 <- p.head:
			r.sent()
		case p.outN <- p.chunk:
			r.sent()
		case <-p.timerC:
			r.expire()
		case <-r.wake:
		case <-ctx.Done():
			return nil
		default:
			if r.opt.Idle != nil && (p.in1 != nil || p.inN != nil) && r.aging.Len() > 0 && r.opt.Idle(r.received) {
				r.closeAll(&r.aging)
				continue
			}
			var stop bool
			if stop, err = r.wait(ctx, &p); stop {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
}

// pass decides what this pass may do: receive while fewer than MaxWaiting
// closed batches wait, send the oldest ready batch, and wake for the
// oldest aging batch's Wait.
func (r *batchRun[T]) pass(p *batchPass[T]) {
	if r.waiting < r.opt.MaxWaiting {
		p.in1, p.inN = r.in1, r.inN
	}
	if r.ready.Len() > 0 {
		p.head = r.ready.Front().items
		p.out1, p.outN = r.out1, r.outN
		if p.outN != nil {
			if r.chunk == nil { // made once per batch, not per pass
				r.chunk = [][]T{p.head}
			}
			p.chunk = r.chunk
		}
	}
	p.timerC = r.arm()
}

// wait is the pass's blocking select, once nothing was ready at once and
// Idle did not close the aging batches; stop reports cancellation.
func (r *batchRun[T]) wait(ctx context.Context, p *batchPass[T]) (stop bool, err error) {
	select {
	case v, ok := <-p.in1:
		err = r.got1(v, ok)
	case vs, ok := <-p.inN:
		err = r.gotN(vs, ok)
	case p.out1 <- p.head:
		r.sent()
	case p.outN <- p.chunk:
		r.sent()
	case <-p.timerC:
		r.expire()
	case <-r.wake:
	case <-ctx.Done():
		return true, nil
	}
	return false, err
}

func (r *batchRun[T]) got1(v T, ok bool) error {
	if !ok {
		r.in1 = nil
		r.endOfInput()
		return nil
	}
	r.received++
	return r.add(v)
}

func (r *batchRun[T]) gotN(vs []T, ok bool) error {
	if !ok {
		r.inN = nil
		r.endOfInput()
		return nil
	}
	r.received += uint64(len(vs))
	for _, v := range vs {
		if err := r.add(v); err != nil {
			return err
		}
	}
	return nil
}

// endOfInput closes every open batch: what is left goes as it is.
func (r *batchRun[T]) endOfInput() {
	r.closeAll(&r.aging)
	r.closeAll(&r.owing)
}

// add puts v into its key's open batch, closing batches as the limits say.
func (r *batchRun[T]) add(v T) error {
	var k string
	if r.opt.Key != nil {
		k = r.opt.Key(v)
	}
	ks := r.keys[k]
	if ks == nil {
		ks = &keyState[T]{key: k}
		r.keys[k] = ks
	}
	size := 0
	if r.opt.Bytes > 0 {
		if size = r.opt.SizeOf(v); size < 0 {
			return fmt.Errorf("operators: Batch: SizeOf returned %d, a negative size", size)
		}
		if ob := ks.open; ob != nil && ob.bytes+size > r.opt.Bytes {
			r.close(ks)
		}
	}
	ob := ks.open
	if ob == nil {
		if r.open >= r.opt.MaxOpen {
			r.evictOldest()
		}
		ob = &openBatch[T]{ks: ks, first: time.Now(), items: make([]T, 0, min(r.opt.Size, 64))}
		ob.in = &r.aging
		if ks.owed {
			ob.in = &r.owing
		}
		ob.at = ob.in.PushBack(ob)
		ks.open = ob
		r.keys[k] = ks // again, if closing for Bytes just forgot it
		r.open++
	}
	ob.items = append(ob.items, v)
	ob.bytes += size
	if len(ob.items) >= r.opt.Size || r.opt.Bytes > 0 && ob.bytes >= r.opt.Bytes {
		r.close(ks)
	}
	return nil
}

// evictOldest closes the open batch whose first element is the oldest.
func (r *batchRun[T]) evictOldest() {
	a, o := r.aging.Front(), r.owing.Front()
	victim := a
	if a == nil || o != nil && o.Value.(*openBatch[T]).first.Before(a.Value.(*openBatch[T]).first) {
		victim = o
	}
	if victim != nil {
		r.close(victim.Value.(*openBatch[T]).ks)
	}
}

// close closes ks's open batch and queues it.
func (r *batchRun[T]) close(ks *keyState[T]) {
	ob := ks.open
	ob.in.Remove(ob.at)
	ks.open = nil
	r.open--
	r.waiting++
	switch {
	case !r.b.orderedKey(ks.key):
		r.ready.Push(readyBatch[T]{items: ob.items})
		delete(r.keys, ks.key)
	case !ks.owed:
		ks.owed = true
		r.ready.Push(readyBatch[T]{ks: ks, items: ob.items})
	default:
		ks.backlog = append(ks.backlog, ob.items)
	}
}

// closeAll closes every open batch of l.
func (r *batchRun[T]) closeAll(l *list.List) {
	for l.Len() > 0 {
		r.close(l.Front().Value.(*openBatch[T]).ks)
	}
}

// sent records that the head of ready was handed downstream.
func (r *batchRun[T]) sent() {
	rb := r.ready.Pop()
	r.waiting--
	r.chunk = nil
	if rb.ks != nil { // an Ordered key's batch
		r.inFlight[&rb.items[0]] = rb.ks
	}
}

// takeReleases applies the releases Release queued.
func (r *batchRun[T]) takeReleases() {
	if !r.opt.Ordered {
		return
	}
	r.b.mu.Lock()
	rel := r.released
	r.released = nil
	r.b.mu.Unlock()
	for _, p := range rel {
		ks, ok := r.inFlight[p]
		if !ok {
			continue
		}
		delete(r.inFlight, p)
		ks.owed = false
		switch {
		case len(ks.backlog) > 0:
			ks.owed = true
			r.ready.Push(readyBatch[T]{ks: ks, items: ks.backlog[0]})
			ks.backlog[0] = nil
			ks.backlog = ks.backlog[1:]
		case ks.open != nil:
			r.close(ks) // it waited for this release: it goes now
		default:
			delete(r.keys, ks.key)
		}
	}
}

// arm points the timer at the oldest aging batch's deadline and returns
// its channel (nil when nothing ages).
func (r *batchRun[T]) arm() <-chan time.Time {
	front := r.aging.Front()
	if front == nil {
		if r.armedFor != nil {
			r.timer.Stop()
			r.armedFor = nil
		}
		return nil
	}
	ob := front.Value.(*openBatch[T])
	if ob != r.armedFor {
		r.timer.Reset(time.Until(ob.first.Add(r.opt.Wait)))
		r.armedFor = ob
	}
	return r.timer.C
}

// expire closes the aging batches whose oldest element has waited Wait.
func (r *batchRun[T]) expire() {
	r.armedFor = nil
	now := time.Now()
	for f := r.aging.Front(); f != nil; f = r.aging.Front() {
		ob := f.Value.(*openBatch[T])
		if now.Sub(ob.first) < r.opt.Wait {
			return
		}
		r.close(ob.ks)
	}
}
