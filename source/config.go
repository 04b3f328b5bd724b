package source

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	gax "github.com/googleapis/gax-go/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow/internal/event"
	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Defaults applied to the zero values of Config.
const (
	DefaultStreamAckDeadline      = 60 * time.Second
	DefaultMaxOutstandingMessages = 1000
	DefaultMaxOutstandingBytes    = 100 << 20 // 100 MiB
	defaultStreams                = 1
	DefaultHeartbeatInterval      = 30 * time.Second
	DefaultHeartbeatTimeout       = 15 * time.Second
	DefaultDrainTimeout           = 30 * time.Second
	// DefaultReconnectTimeout is how long a stream may go on failing
	// without a healthy stream before the Source fails.
	DefaultReconnectTimeout = 2 * time.Minute

	// MinStreamAckDeadline and MaxStreamAckDeadline are the API's bounds.
	MinStreamAckDeadline = 10 * time.Second
	MaxStreamAckDeadline = 600 * time.Second
	// MaxStreams bounds Config.Streams: each stream costs two goroutines
	// and a share of the flow-control budget.
	MaxStreams = 64
	// MaxClientIDLength bounds Config.ClientID. The service documents no
	// bound; 128 bytes is ample and keeps every request small.
	MaxClientIDLength = 128
)

// Unlimited, as Config.ReconnectTimeout, never gives up, and as
// Config.MaxOutstandingMessages or MaxOutstandingBytes turns that limit
// off. It is the module's one "no limit"; other negative values are errors.
const Unlimited = limits.Unlimited

// Config configures Subscribe. The zero value of every field but
// Subscription means the documented default.
type Config struct {
	// Subscription is the full name "projects/P/subscriptions/S".
	Subscription string

	// StreamAckDeadline is the ack deadline the server applies to messages
	// delivered on the streams, rounded up to whole seconds: 0 means 60 s,
	// otherwise 10–600 s. A fused step with an AckDeadline changes it later.
	StreamAckDeadline time.Duration

	// ClientID identifies this subscriber to the server across streams and
	// reconnects; "" means a random id drawn once per Subscribe call.
	ClientID string

	// MaxOutstandingMessages and MaxOutstandingBytes are the server-side
	// flow-control limits, divided among the streams. 0 means 1000
	// messages and 100 MiB; Unlimited turns a limit off.
	MaxOutstandingMessages int64
	MaxOutstandingBytes    int64

	// Streams is the number of StreamingPull streams, merged into one
	// output. 0 means 1; at most MaxStreams.
	Streams int

	// HeartbeatInterval (0: 30 s) is the time between heartbeats on each
	// stream. HeartbeatTimeout (0: 15 s) is how long the server may stay
	// silent after the oldest unanswered heartbeat before the stream is
	// restarted, once it has shown that it answers heartbeats (Google's
	// emulator never does).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration

	// Backoff is the reconnect delay policy: exponential with half jitter
	// (the k-th delay is drawn from [cap/2, cap], cap = Initial·Multiplier^k
	// up to Max, and is at least Initial; gax-go's own full jitter is not
	// used). Zero values mean 100 ms, 60 s and 2. Each stream runs its own
	// sequence, reset only after a healthy stream: one that delivered a
	// message or stayed open 10 s.
	Backoff gax.Backoff

	// Classify decides whether a stream failure is retried; nil means
	// DefaultClassifier.
	Classify Classifier

	// ReconnectTimeout bounds how long a stream may keep failing without
	// one healthy stream, counted from the end of the last healthy one (or
	// the start): the first failure at or after it ends the Source with an
	// *UnreachableError. The last attempt is made at the timeout and its
	// opening is cut 1 s after. 0 means DefaultReconnectTimeout; Unlimited
	// never gives up.
	ReconnectTimeout time.Duration

	// DrainTimeout bounds the graceful end that Stop begins: then every run
	// still going is abandoned, its pipeline cancelled and what it left
	// unsettled nacked. 0 means DefaultDrainTimeout; negative is an error.
	DrainTimeout time.Duration

	// TracerProvider, if set, traces every message as Google's clients do
	// (a "<subscription> subscribe" span, and ack and nack RPC spans linked
	// to it). Nil: nothing is traced or allocated for tracing.
	TracerProvider trace.TracerProvider

	// events, if set, also receives every event (tests observe with it).
	events func(event.Event)

	// Logger receives the stream lifecycle and ack failures (nil:
	// slog.Default()).
	Logger *slog.Logger
}

// Validate reports the first invalid field, in words that name it.
func (c Config) Validate() error {
	if err := limits.CheckName(limits.Subscriptions, c.Subscription); err != nil {
		return fmt.Errorf("pubsubflow/source: %w", err)
	}
	d, b := c.StreamAckDeadline, c.Backoff
	for _, r := range []struct {
		bad        bool
		field      string
		value      any
		constraint string
	}{
		{d != 0 && (d < MinStreamAckDeadline || d > MaxStreamAckDeadline), "StreamAckDeadline", d, "must be 0 (60 s) or within 10s–10m0s"},
		{len(c.ClientID) > MaxClientIDLength, "ClientID", fmt.Sprintf("of %d bytes", len(c.ClientID)), fmt.Sprintf("must be at most %d bytes long", MaxClientIDLength)},
		{c.Streams < 0 || c.Streams > MaxStreams, "Streams", c.Streams, fmt.Sprintf("must be within 0–%d (0 means 1)", MaxStreams)},
		{c.HeartbeatInterval < 0, "HeartbeatInterval", c.HeartbeatInterval, "must not be negative"},
		{c.HeartbeatTimeout < 0, "HeartbeatTimeout", c.HeartbeatTimeout, "must not be negative"},
		{c.ReconnectTimeout < 0 && c.ReconnectTimeout != Unlimited, "ReconnectTimeout", c.ReconnectTimeout, fmt.Sprintf("must be ≥ 0 (0 means %v) or Unlimited", DefaultReconnectTimeout)},
		{c.MaxOutstandingMessages < Unlimited, "MaxOutstandingMessages", c.MaxOutstandingMessages, "must be ≥ 0 (0 means the default) or Unlimited (-1)"},
		{c.MaxOutstandingBytes < Unlimited, "MaxOutstandingBytes", c.MaxOutstandingBytes, "must be ≥ 0 (0 means the default) or Unlimited (-1)"},
		{c.DrainTimeout < 0, "DrainTimeout", c.DrainTimeout, fmt.Sprintf("must not be negative (0 means %v)", DefaultDrainTimeout)},
		{b.Initial < 0 || b.Max < 0 || b.Multiplier != 0 && b.Multiplier < 1, "Backoff", fmt.Sprintf("Initial %v, Max %v, Multiplier %v:", b.Initial, b.Max, b.Multiplier),
			"want durations ≥ 0 (0 = default) and a Multiplier of 0 (default 2) or at least 1"},
	} {
		if r.bad {
			return fmt.Errorf("pubsubflow/source: %s %v %s", r.field, r.value, r.constraint)
		}
	}
	return nil
}

// withDefaults returns c with every zero value replaced by its default. It
// does not fill ClientID: Subscribe draws it.
func (c Config) withDefaults() Config {
	c.StreamAckDeadline = cmp.Or(c.StreamAckDeadline, DefaultStreamAckDeadline)
	c.MaxOutstandingMessages = cmp.Or(c.MaxOutstandingMessages, DefaultMaxOutstandingMessages)
	c.MaxOutstandingBytes = cmp.Or(c.MaxOutstandingBytes, DefaultMaxOutstandingBytes)
	c.Streams = cmp.Or(c.Streams, defaultStreams)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.HeartbeatTimeout = cmp.Or(c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	c.ReconnectTimeout = cmp.Or(c.ReconnectTimeout, DefaultReconnectTimeout)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	if c.Classify == nil {
		c.Classify = DefaultClassifier
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// Step is a receipt step: a stage that does its bookkeeping for a message
// the moment it is received (flow.EagerTrack, flow.FlowGate,
// flow.KeyedFlowGate). Only a source can call Receipt (its argument is a
// key internal to this module), so no one else runs a step's hooks.
type Step interface {
	Receipt(message.Key) Receipt
}

// Receipt is what a Step does, as its source runs it. Receive is
// required; every other hook is optional (nil: none).
type Receipt struct {
	// Receive runs on each response's messages, in order with the other
	// steps, on the decoding goroutine, before any of them is queued; lane
	// is the stream's lane (see Budget.Open). It must not block.
	Receive func(lane int, ms []*Message)
	// Budget: the streams open and read only as it allows.
	Budget Budget
	// Ready: a message is handed on only once the channel it returns is
	// closed (nil: at once), e.g. after an exactly-once receipt modack.
	Ready func(*Message) <-chan struct{}
	// AckDeadline is the deadline the step's leases use; the streams adopt
	// it as their stream ack deadline (the first step's that has one).
	AckDeadline func() time.Duration
	// Unsent sees what a run received but will not hand on, before the
	// source nacks what is still unsettled.
	Unsent func([]*Message)
	// HandOff sees each batch just before it leaves the source, on the
	// hand-off goroutine; it returns the messages to hand on, having
	// settled those it removes. It must not block.
	HandOff func(ctx context.Context, ms []*Message) []*Message
	// Failed is closed once the step can no longer do its job; every run
	// of the source then ends with Err. Both or neither.
	Failed func() <-chan struct{}
	Err    func() error
	// Sequence, fused by Pipeline.Via, runs on the source's output and
	// chooses the order messages are handed on in (flow.KeyedFlowGate);
	// it nacks what it still holds when g ends. With runs only the other
	// hooks: write the other steps before such a one.
	Sequence func(g *stage.Group, in <-chan *Message) <-chan *Message
}

// Budget is a client-side flow-control budget as the streams see it
// (flow.FlowGate is one). A source fused with several budgets asks every
// one: a stream opens once each grants it room, asks the server for the
// least grant, and reads only while each has room.
type Budget interface {
	// Open is asked before a stream opens on lane (a number unique in the
	// process, kept by the stream slot across reconnects), with its share
	// of the limits (0: unlimited). It returns the limits the initial
	// request carries, or ok false when there is no room now (the source
	// waits for Wake and asks again). Asked again for an open lane, it
	// lowers the grant to the share. The Budget may call revoke once to
	// have the stream half-close and open again with a new grant.
	Open(lane int, shareMessages, shareBytes int64, revoke func()) (maxMessages, maxBytes int64, ok bool)
	// Closed tells that lane's stream has ended, or that the source no
	// longer asks to open it.
	Closed(lane int)
	// Room reports whether the stream on lane may read another response.
	Room(lane int) bool
	// Wake returns a channel closed when Room or Open may have changed.
	Wake() <-chan struct{}
}

// revokeGrace bounds how long a revoked stream, half-closed, waits for the
// server to end it before it is cancelled.
const revokeGrace = 10 * time.Second

// budgetRecheck bounds how long a stream waits on Budget.Wake before it
// asks the Budget again.
const budgetRecheck = 100 * time.Millisecond
