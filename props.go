package pubsubflow

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/pubsubflow/pubsubflow/stage"
)

// The server says twice whether a subscription orders by key and
// delivers exactly once: in GetSubscription, asked once by NewSubscriber,
// and in the subscription_properties of every StreamingPull response. The
// two can disagree (a subscription updated meanwhile, a proxy, a server
// that misreports one of them). The response's word is what the messages
// come with, so it decides: each message carries it (Ordered,
// ExactlyOnce), its acks follow its ExactlyOnce, and Run and RunBatches
// run the messages of an ordering key one at a time as soon as a message
// says Ordered. A contradiction is warned once per property.

// toldProps is what GetSubscription said of the subscription, against
// which each response's properties are checked.
type toldProps struct {
	ordered, exactlyOnce         bool
	warnedOrdering, warnedExOnce atomic.Bool
}

// check warns, once per property for the subscriber, when m's response
// said otherwise than GetSubscription. Nil (GetSubscription not asked or
// not answered) has nothing to contradict.
func (t *toldProps) check(s *Subscriber, m *Message) {
	if t == nil {
		return
	}
	if m.Ordered != t.ordered && !t.warnedOrdering.Load() && t.warnedOrdering.CompareAndSwap(false, true) {
		effect := "messages of one ordering key run one at a time, in order, as the stream says"
		if !m.Ordered {
			effect = "messages of one ordering key still run one at a time"
		}
		t.warn(s, "message_ordering", t.ordered, m.Ordered, effect)
	}
	if m.ExactlyOnce != t.exactlyOnce && !t.warnedExOnce.Load() && t.warnedExOnce.CompareAndSwap(false, true) {
		t.warn(s, "exactly_once_delivery", t.exactlyOnce, m.ExactlyOnce,
			"each message's acks follow what its response said")
	}
}

func (t *toldProps) warn(s *Subscriber, prop string, told, stream bool, effect string) {
	s.cfg.Logger.Warn("pubsubflow: the stream's subscription properties contradict GetSubscription; the stream's decide",
		"subscription", s.sub, "property", prop, "get_subscription", told, "stream", stream, "effect", effect)
}

// needsOrder reports whether m must wait for the earlier messages of its
// ordering key: its response said the subscription orders by key.
func needsOrder(m *Message) bool { return m.Ordered && m.OrderingKey != "" }

// switchFlow is Run's processing stage when the subscriber was not told
// that the subscription orders by key. Messages go to free, an Unordered
// map, until the first that needsOrder; then free is closed, and once its
// handlers are done every message from there on goes to keyed, the same
// handlers keyed by ordering key. The switch waits for free to finish so
// that no more than parallelism handlers ever run, and nothing that came
// before runs alongside what needs order.
//
// The switch's own goroutines (routing, merging) are the subscriber's, not
// the pipeline's: they also stop once abandoned is done — Close has given
// up on the runs past the drain timeout, when it cancels Run's pipelines —
// so that none outlives Close in a pipeline whose context Close does not
// own (Source → a stage of the user's → Process, the user's stage stalled).
type switchFlow struct {
	free      stage.BatchFlow[*Message, *Message]
	keyed     stage.Flow[*Message, *Message]
	abandoned context.Context // the subscriber's life.abandoned
}

var _ stage.BatchFlow[*Message, *Message] = (*switchFlow)(nil)

// router is one run of a switchFlow: its two maps' inputs and the end of
// free.
type router struct {
	freeIn   chan<- []*Message // nil once closed
	keyedIn  chan<- *Message
	freeDone <-chan struct{} // closed once free has finished (not when stopped)
}

// switchTo closes free and waits for its handlers to finish; false if ctx
// ended first.
func (r *router) switchTo(ctx context.Context) bool {
	if r.freeIn == nil {
		return true
	}
	close(r.freeIn)
	r.freeIn = nil
	select {
	case <-r.freeDone:
		return true
	case <-ctx.Done():
		return false
	}
}

// route hands b on: to free while nothing needed order, else (from the
// first message that does) to keyed. False once ctx ended.
func (r *router) route(ctx context.Context, b []*Message) bool {
	if r.freeIn != nil {
		i := 0
		for i < len(b) && !needsOrder(b[i]) {
			i++
		}
		if i > 0 && !stage.Send(ctx, r.freeIn, b[:i:i]) {
			return false
		}
		if b = b[i:]; len(b) == 0 || !r.switchTo(ctx) {
			return len(b) == 0
		}
	}
	for _, m := range b {
		if !stage.Send(ctx, r.keyedIn, m) {
			return false
		}
	}
	return true
}

// run routes in's batches until in closes or ctx ends, then closes the
// maps' inputs, so they finish what they hold and end.
func (r *router) run(ctx context.Context, in <-chan []*Message) {
	defer close(r.keyedIn)
	defer func() {
		if r.freeIn != nil {
			close(r.freeIn)
		}
	}()
	for {
		b, ok := stage.Recv(ctx, in)
		if !ok || !r.route(ctx, b) {
			return
		}
	}
}

// forward sends what arrives on from to out, each as a batch (wrap),
// until from closes (true) or ctx ends (false). What it holds when ctx
// ends is left to the run: its source nacks what the pipeline left.
func forward[T any](ctx context.Context, from <-chan T, out chan<- []*Message, wrap func(T) []*Message) bool {
	for {
		v, ok := stage.Recv(ctx, from)
		if !ok {
			return ctx.Err() == nil
		}
		if !stage.Send(ctx, out, wrap(v)) {
			return false
		}
	}
}

func one(m *Message) []*Message    { return []*Message{m} }
func same(b []*Message) []*Message { return b }

// runCtx is the context of one run's own goroutines: g's, ended early
// once the subscriber abandons its runs.
func (f *switchFlow) runCtx(g *stage.Group) context.Context {
	ctx, cancel := context.WithCancel(g.Context())
	stop := context.AfterFunc(f.abandoned, cancel)
	g.OnDone(func() { stop(); cancel() })
	return ctx
}

// RunBatches routes in's batches between the two maps (a batch whose
// messages are split keeps its order: the free part goes first, and the
// rest only once free has finished) and merges their results.
func (f *switchFlow) RunBatches(g *stage.Group, in <-chan []*Message) <-chan []*Message {
	return f.runBatches(f.runCtx(g), g, in)
}

// runBatches is RunBatches with its goroutines under ctx (runCtx).
func (f *switchFlow) runBatches(ctx context.Context, g *stage.Group, in <-chan []*Message) <-chan []*Message {
	freeIn, keyedIn := make(chan []*Message), make(chan *Message)
	freeDone := make(chan struct{})
	r := &router{freeIn: freeIn, keyedIn: keyedIn, freeDone: freeDone}
	freeOut, keyedOut := f.free.RunBatches(g, freeIn), f.keyed.Run(g, keyedIn)
	out := make(chan []*Message)
	var wg sync.WaitGroup
	wg.Add(2)
	g.Go(func(context.Context) error {
		defer wg.Done()
		if forward(ctx, freeOut, out, same) {
			close(freeDone) // free has finished: every handler it started is done
		}
		return nil
	})
	g.Go(func(context.Context) error {
		defer wg.Done()
		forward(ctx, keyedOut, out, one)
		return nil
	})
	g.Go(func(context.Context) error { r.run(ctx, in); return nil })
	g.Go(func(context.Context) error { wg.Wait(); close(out); return nil })
	return out
}

// Run is RunBatches for a source that hands on one message at a time.
func (f *switchFlow) Run(g *stage.Group, in <-chan *Message) <-chan *Message {
	ctx := f.runCtx(g)
	batches := make(chan []*Message)
	g.Go(func(context.Context) error {
		defer close(batches)
		for {
			m, ok := stage.Recv(ctx, in)
			if !ok || !stage.Send(ctx, batches, []*Message{m}) {
				return nil
			}
		}
	})
	return stage.Unbatch(g, f.runBatches(ctx, g, batches), nil)
}
