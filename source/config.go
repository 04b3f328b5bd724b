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

	// MinStreamAckDeadline and MaxStreamAckDeadline are the API's bounds.
	MinStreamAckDeadline = 10 * time.Second
	MaxStreamAckDeadline = 600 * time.Second
	// MaxStreams bounds Config.Streams: each stream costs two goroutines
	// and a share of the flow-control budget.
	MaxStreams = 64
	// MaxClientIDLength bounds Config.ClientID. The service documents no
	// bound; 128 bytes is ample for an id and keeps every request small.
	MaxClientIDLength = 128
)

// Config configures Subscribe. The zero value of every field but
// Subscription means the documented default.
type Config struct {
	// Subscription is the full name "projects/P/subscriptions/S".
	Subscription string

	// StreamAckDeadline is the ack deadline the server applies to messages
	// delivered on the streams, in whole seconds (rounded up). 0 means 60 s;
	// otherwise 10–600 s. A fused step with an AckDeadline (flow.EagerTrack)
	// changes it later, to the deadline its leases use.
	StreamAckDeadline time.Duration

	// ClientID identifies this subscriber to the server across streams and
	// reconnects (the server uses it to keep ordering and flow-control
	// state). "" means a random id drawn once per Subscribe call.
	ClientID string

	// MaxOutstandingMessages and MaxOutstandingBytes are the server-side
	// flow-control limits of the subscription, divided among the streams.
	// 0 means 1000 messages and 100 MiB; Unlimited turns a limit off (0 on
	// the wire).
	MaxOutstandingMessages int64
	MaxOutstandingBytes    int64

	// Streams is the number of StreamingPull streams, merged into one
	// output. 0 means 1; at most MaxStreams.
	Streams int

	// HeartbeatInterval is the time between heartbeats on each stream; 0
	// means 30 s. HeartbeatTimeout is how long the server may stay silent
	// after a heartbeat before the stream is restarted, once it has shown
	// that it answers heartbeats (Google's emulator never does); 0 means 15 s.
	// The timeout runs from the oldest unanswered heartbeat, so one longer
	// than the interval still works here (a short interval with the
	// default timeout is common in tests); SubscriberConfig, for users,
	// refuses a timeout set longer than the interval and intervals below
	// 1 s.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration

	// Backoff is the reconnect delay policy: exponential with half jitter.
	// The k-th delay since the last healthy stream is drawn uniformly from
	// [cap/2, cap], cap = Initial·Multiplier^k up to Max, and is at least
	// Initial (gax-go's type; its own full jitter is not used, since it
	// lets every delay be as short as Initial). Zero Initial means 100 ms,
	// zero Max 60 s, zero Multiplier 2. Each stream runs its own sequence,
	// reset only after a healthy stream: one that delivered a message (a
	// response with at least one received message) or stayed open 10 s.
	// Empty responses do not make a stream healthy, so a server that
	// answers each stream with one and then fails gets reconnects ever
	// further apart.
	Backoff gax.Backoff

	// Classify decides whether a stream failure is retried; nil means
	// DefaultClassifier.
	Classify Classifier

	// ReconnectTimeout bounds how long a stream may keep failing (an
	// endpoint that never answers, a network that is down, a server that
	// accepts each stream and drops it) without one healthy stream (see
	// Backoff): it counts from the end of the last healthy stream, or from
	// the start when none was, and the first failure at or after it ends
	// the Source with an *UnreachableError carrying the last status. The
	// last attempt is made at the timeout and opening it is cut 1 s after,
	// so the Source ends within about a second of it. Every attempt before
	// it is reported to Events and the Logger. 0 means
	// DefaultReconnectTimeout (2 min); Unlimited never gives up.
	ReconnectTimeout time.Duration

	// DrainTimeout bounds the graceful end that Stop begins. Until it
	// passes, each run's pipeline goes on with what the run handed on
	// before Stop; then every run still going is abandoned: its pipeline
	// is cancelled and what it was handed and has not settled is nacked,
	// so the server redelivers it at once and none of it is processed
	// here. 0 means DefaultDrainTimeout (30 s); negative is an error. A
	// Subscriber passes its own DrainTimeout.
	DrainTimeout time.Duration

	// TracerProvider, if set, traces every message as Google's clients do:
	// a "<subscription> subscribe" span from receipt until the server took
	// its ack or nack, a child of the publisher's trace context from its
	// attributes, and "ack" and "nack" RPC spans linked to the messages
	// they settle. Nil: nothing is traced or allocated for tracing.
	TracerProvider trace.TracerProvider

	// events, if set, also receives every event (tests observe with it).
	events func(event.Event)

	// Logger receives the stream lifecycle (connects at Info, reconnects
	// and failures at Warn, terminal errors at Error) and ack failures
	// (nil: slog.Default()).
	Logger *slog.Logger
}

// Validate reports the first invalid field, in words that name it.
func (c Config) Validate() error {
	if err := validSubscription(c.Subscription); err != nil {
		return err
	}
	if d := c.StreamAckDeadline; d != 0 && (d < MinStreamAckDeadline || d > MaxStreamAckDeadline) {
		return fmt.Errorf("pubsubflow/source: StreamAckDeadline %v must be 0 (60 s) or within 10s–10m0s", d)
	}
	if len(c.ClientID) > MaxClientIDLength {
		return fmt.Errorf("pubsubflow/source: ClientID is %d bytes long; at most %d", len(c.ClientID), MaxClientIDLength)
	}
	if c.Streams < 0 || c.Streams > MaxStreams {
		return fmt.Errorf("pubsubflow/source: Streams %d must be within 0–%d (0 means 1)", c.Streams, MaxStreams)
	}
	if c.HeartbeatInterval < 0 {
		return fmt.Errorf("pubsubflow/source: HeartbeatInterval %v must not be negative", c.HeartbeatInterval)
	}
	if c.HeartbeatTimeout < 0 {
		return fmt.Errorf("pubsubflow/source: HeartbeatTimeout %v must not be negative", c.HeartbeatTimeout)
	}
	if c.ReconnectTimeout < 0 && c.ReconnectTimeout != Unlimited {
		return fmt.Errorf("pubsubflow/source: ReconnectTimeout %v must be ≥ 0 (0 means %v) or Unlimited", c.ReconnectTimeout, DefaultReconnectTimeout)
	}
	if err := validLimit("MaxOutstandingMessages", c.MaxOutstandingMessages); err != nil {
		return err
	}
	if err := validLimit("MaxOutstandingBytes", c.MaxOutstandingBytes); err != nil {
		return err
	}
	if c.DrainTimeout < 0 {
		return fmt.Errorf("pubsubflow/source: DrainTimeout %v must not be negative (0 means %v)", c.DrainTimeout, DefaultDrainTimeout)
	}
	if b := c.Backoff; b.Initial < 0 || b.Max < 0 || b.Multiplier != 0 && b.Multiplier < 1 {
		return fmt.Errorf("pubsubflow/source: Backoff Initial %v, Max %v, Multiplier %v: want durations ≥ 0 (0 = default) and a Multiplier of 0 (default 2) or at least 1", b.Initial, b.Max, b.Multiplier)
	}
	return nil
}

// validSubscription checks the name by the service's rules, the one
// validator the Subscriber, the Publisher, pubsubtest and the CLI share.
func validSubscription(s string) error {
	if err := limits.CheckName(limits.Subscriptions, s); err != nil {
		return fmt.Errorf("pubsubflow/source: %w", err)
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
// flow.KeyedFlowGate, each written right after the source in a pipeline,
// or given to With). Its Receipt declares what it does; only a source can
// call it (its argument is a key internal to this module), so no one
// else can call a step's hooks out of turn.
type Step interface {
	Receipt(message.Key) Receipt
}

// Receipt is what a Step does, as its source runs it. Receive is
// required; every other hook is optional (nil: none).
type Receipt struct {
	// Receive runs on each response's messages, in order with the other
	// steps, on the goroutine that decoded them, before any of them is
	// queued: lane is the stream's lane, a number unique in the process
	// (the one its Budgets opened). It must not block.
	Receive func(lane int, ms []*Message)
	// Budget: the streams open and read only as it allows (every step's
	// budget counts).
	Budget Budget
	// Ready: a message is handed on only once the channel it returns is
	// closed (nil: at once); an exactly-once lease waits there for its
	// receipt modack.
	Ready func(*Message) <-chan struct{}
	// AckDeadline is the deadline the step's leases use; the streams adopt
	// it as their stream ack deadline, so a message's deadline before its
	// first extension is already the one its processing needs (the first
	// step's that has one counts).
	AckDeadline func() time.Duration
	// Unsent sees what a run received but will not hand on, before the
	// source nacks what is still unsettled (a Subscriber settles it with
	// its shutdown outcome while draining).
	Unsent func([]*Message)
	// HandOff sees each batch just before it leaves the source, on the
	// source's hand-off goroutine, with the run's context; it returns the
	// messages to hand on, having settled those it removes. It must not
	// block.
	HandOff func(ctx context.Context, ms []*Message) []*Message
	// Failed is closed once the step can no longer do its job
	// (flow.EagerTrack whose Extender was closed); every run of the source
	// then ends with Err while its streams run. Both or neither.
	Failed func() <-chan struct{}
	Err    func() error
	// Sequence, fused by Pipeline.Via, chooses the order in which the
	// source's messages are handed on (flow.KeyedFlowGate: by the keys'
	// shares): it runs on the source's output, and the pipeline's next
	// stage reads its output. It takes in what the source hands on at
	// once, up to a bound of its own, and nacks what it still holds when g
	// ends. (With runs only the other hooks: write the other steps before
	// such a one.)
	Sequence func(g *stage.Group, in <-chan *Message) <-chan *Message
}

// Budget is a client-side flow-control budget as the streams see it
// (flow.FlowGate is one). The source only asks; it knows nothing of
// permits. A source fused with several budgets asks every one: a stream
// opens once each grants it room, asks the server for the least grant,
// and reads only while each has room.
type Budget interface {
	// Open is asked before a stream opens on lane (a number the source
	// draws for one stream slot, unique in the process; the slot's
	// reconnects reuse it), with the stream's share of the limits (0:
	// unlimited). It returns the limits the stream's initial request is
	// to carry, or ok false when there is no room for a stream now: the
	// source then waits for Wake (or budgetRecheck) and asks again. Asked
	// again for a lane it opened, it lowers the lane's grant to the share
	// and succeeds (the source does so with the least grant of its
	// budgets). The Budget may call revoke (once, from any goroutine) to
	// have the stream end so that its grant can be shared: the stream
	// half-closes, reads what the server still sends until the server
	// ends it, and opens again at once (cancelled if the server has not
	// ended it within revokeGrace).
	Open(lane int, shareMessages, shareBytes int64, revoke func()) (maxMessages, maxBytes int64, ok bool)
	// Closed tells that lane's stream has ended, or, for a lane not open,
	// that the source no longer asks to open it.
	Closed(lane int)
	// Room reports whether the stream on lane may read another response.
	Room(lane int) bool
	// Wake returns a channel closed when Room or Open may have changed.
	Wake() <-chan struct{}
}

// revokeGrace bounds how long a stream a Budget revoked waits, once it
// has half-closed, for the server to end it: then it is cancelled (what
// the server sent on it meanwhile and the client had not read is
// redelivered after its ack deadline).
const revokeGrace = 10 * time.Second

// budgetRecheck bounds how long a stream waits on Budget.Wake before it
// asks the Budget again.
const budgetRecheck = 100 * time.Millisecond
