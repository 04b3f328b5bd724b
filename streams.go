package pubsubflow

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/reugn/go-streams"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/sink"
	"github.com/pubsubflow/pubsubflow/stage"
)

// DefaultStreamsHold is StreamsOptions.Hold's default: longer than common
// windows, short next to MaxExtension so a dropped message frees its
// permit soon.
const DefaultStreamsHold = time.Minute

// streamsWarnEvery is how often, at most, Streams logs what it settled.
const streamsWarnEvery = time.Minute

// StreamsOptions configure Streams. The zero value nacks, counts and logs
// a message still inside the sub-graph a minute after it went in.
type StreamsOptions struct {
	// Name names the sub-graph in the log (default: the file and line of
	// the Streams call).
	Name string
	// Hold is the longest a message may stay inside (default
	// DefaultStreamsHold; settled between 7/8 Hold and Hold): set it above
	// the graph's longest window.
	Hold time.Duration
	// Lost is the outcome of such a message (zero: Nack, which loses
	// nothing); Ack when the graph drops what it does not want.
	Lost Outcome
	// NackDelay is the delay of a NackAfter Lost, 0–600 s.
	NackDelay time.Duration
	// Logger receives the Warns (nil: the messages' Subscriber's Logger,
	// else slog.Default()).
	Logger *slog.Logger
}

// Validate reports a bad option, naming it.
func (o StreamsOptions) Validate() error {
	var errs []error
	if o.Hold < 0 {
		errs = append(errs, fmt.Errorf("pubsubflow: StreamsOptions.Hold %v: want > 0 (0 = default %v)", o.Hold, DefaultStreamsHold))
	}
	switch o.Lost {
	case 0, Ack, Nack, NackAfter, NoOp:
	default:
		errs = append(errs, fmt.Errorf("pubsubflow: StreamsOptions.Lost %v: want ack, nack, nack-after or no-op", o.Lost))
	}
	if o.NackDelay < 0 || o.NackDelay > 600*time.Second {
		errs = append(errs, fmt.Errorf("pubsubflow: StreamsOptions.NackDelay %v: want 0–600s", o.NackDelay))
	}
	return errors.Join(errs...)
}

// Streams embeds a go-streams sub-graph between a Subscriber's stages;
// build is as in pipeline.Streams, and an outlet emitting anything but
// *Message ends the pipeline with a *pipeline.TypeError. A message that
// does not come out is settled Hold after it went in with Lost, counted
// in Stats.StreamsLost and logged (at most once a minute); a sub-graph
// holding half the MaxOutstandingMessages for longer than Hold is warned
// of. What is inside when it closes is nacked.
func Streams(build func(g *stage.Group, in streams.Source) streams.Outlet, opt StreamsOptions) stage.Flow[*Message, *Message] {
	if err := opt.Validate(); err != nil {
		return failing(err)
	}
	if opt.Name == "" {
		opt.Name = "go-streams sub-graph"
		if _, file, line, ok := runtime.Caller(1); ok {
			opt.Name = fmt.Sprintf("go-streams sub-graph at %s:%d", filepath.Base(file), line)
		}
	}
	opt.Hold, opt.Lost = cmp.Or(opt.Hold, DefaultStreamsHold), cmp.Or(opt.Lost, Nack)
	w := &graphWatch{opt: opt}
	return pipeline.Streams[*Message, *Message](build, pipeline.StreamsOptions[*Message]{
		Lost:  func(m *Message) { m.Nack() },
		Hold:  opt.Hold,
		Late:  w.late,
		Watch: w.watch,
	})
}

// failing is a flow that ends its pipeline with err.
func failing(err error) stage.Flow[*Message, *Message] {
	return stage.FlowFunc[*Message, *Message](func(g *stage.Group, _ <-chan *Message) <-chan *Message {
		g.Fail(err)
		return closedChan[*Message]()
	})
}

// graphWatch settles, counts and logs what a sub-graph held too long.
type graphWatch struct {
	opt StreamsOptions

	mu           sync.Mutex
	unlogged     int       // settled since the last Warn
	lastWarn     time.Time // zero: none yet
	crowdFrom    time.Time // first check that found the graph crowded; zero: not crowded
	crowdSaid    bool      // this crowding was logged
	owner        *Subscriber
	subscription string
}

func (w *graphWatch) late(ms []*Message) {
	n := 0
	for _, m := range ms {
		if sink.Settle(m, w.opt.Lost, w.opt.NackDelay) {
			n++
		}
	}
	owner := ownerOf(ms[0])
	if owner != nil {
		owner.c.streamsLost.Add(uint64(n))
	}
	w.mu.Lock()
	w.unlogged += n
	w.owner, w.subscription = owner, ms[0].Subscription
	w.mu.Unlock()
	w.flush()
}

// flush logs the count settled since the last Warn, rate-limited.
func (w *graphWatch) flush() {
	w.mu.Lock()
	now := time.Now()
	if w.unlogged == 0 || !w.lastWarn.IsZero() && now.Sub(w.lastWarn) < streamsWarnEvery {
		w.mu.Unlock()
		return
	}
	count, owner, subscription := w.unlogged, w.owner, w.subscription
	w.unlogged, w.lastWarn = 0, now
	w.mu.Unlock()
	w.logger(owner).Warn("pubsubflow: messages went into a go-streams sub-graph and did not come out within its Hold; settled (set StreamsOptions.Lost to ack what the graph drops on purpose, or Hold above its windows)",
		"graph", w.opt.Name, "count", count, "hold", w.opt.Hold, "outcome", w.opt.Lost, "subscription", subscription)
}

// watch warns, once per spell, of a graph that has held half the budget
// at every check for longer than Hold.
func (w *graphWatch) watch(inside int, oldest *Message) {
	owner, limit := ownerOf(oldest), int64(0)
	if owner != nil {
		limit = owner.fc.MaxMessages()
	}
	crowded := limit > 0 && int64(inside)*2 >= limit
	now := time.Now()
	w.mu.Lock()
	switch {
	case !crowded:
		w.crowdFrom, w.crowdSaid = time.Time{}, false
	case w.crowdFrom.IsZero():
		w.crowdFrom = now
	}
	say := crowded && !w.crowdSaid && now.Sub(w.crowdFrom) > w.opt.Hold
	w.crowdSaid = w.crowdSaid || say
	w.mu.Unlock()
	if say {
		w.logger(owner).Warn("pubsubflow: a go-streams sub-graph has held half the flow budget or more for longer than its Hold; the subscriber receives little else",
			"graph", w.opt.Name, "inside", inside, "max_outstanding_messages", limit, "hold", w.opt.Hold, "subscription", oldest.Subscription)
	}
	w.flush()
}

func (w *graphWatch) logger(owner *Subscriber) *slog.Logger {
	switch {
	case w.opt.Logger != nil:
		return w.opt.Logger
	case owner != nil:
		return owner.cfg.Logger
	}
	return slog.Default()
}

// owners maps a Subscriber's settle path to it, so that Streams, in any
// pipeline, counts and logs in its name.
var owners sync.Map

// own records s as the owner of m's settle path (on its first message).
func (s *Subscriber) own(m *Message) {
	if s.owned.Load() == nil {
		if p := message.Of(m).Path; p != nil && s.owned.CompareAndSwap(nil, &p) {
			owners.Store(p, s)
		}
	}
}

func (s *Subscriber) disown() {
	if p := s.owned.Load(); p != nil {
		owners.Delete(*p)
	}
}

// ownerOf is the Subscriber m came from, or nil (none, or a hand-built
// chain).
func ownerOf(m *Message) *Subscriber {
	if m == nil || message.Of(m).Path == nil {
		return nil
	}
	s, _ := owners.Load(message.Of(m).Path)
	owner, _ := s.(*Subscriber)
	return owner
}

// Filter passes on the messages keep reports true for and settles every
// other one at once with drop, one of:
//
//   - Ack: processed, not wanted; the server forgets the message.
//   - Nack: try again, at once. A message keep always refuses goes round
//     for ever: bound it with a dead-letter topic, or use pipeline.Filter
//     with m.NackAfter(d) to try again later.
//   - NoOp: send nothing; the server redelivers it when its deadline passes.
//
// Any other drop ends the pipeline with an error, at once.
func Filter(keep func(*Message) bool, drop Outcome) stage.Flow[*Message, *Message] {
	switch drop {
	case Ack, Nack, NoOp:
	default:
		return failing(fmt.Errorf("pubsubflow: Filter: drop %v: want ack (not wanted), nack (try again) or no-op", drop))
	}
	return pipeline.Filter(keep, func(m *Message) { sink.Settle(m, drop, 0) })
}
