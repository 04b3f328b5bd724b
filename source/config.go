package source

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pubsubflow/pubsubflow/event"
	"github.com/pubsubflow/pubsubflow/message"
)

// Defaults applied to the zero values of Config.
const (
	DefaultStreamAckDeadline      = 60 * time.Second
	DefaultMaxOutstandingMessages = 1000
	DefaultMaxOutstandingBytes    = 100 << 20 // 100 MiB
	DefaultStreams                = 1
	DefaultHeartbeatInterval      = 30 * time.Second
	DefaultHeartbeatTimeout       = 15 * time.Second

	// MinStreamAckDeadline and MaxStreamAckDeadline are the API's bounds.
	MinStreamAckDeadline = 10 * time.Second
	MaxStreamAckDeadline = 600 * time.Second
	// MaxStreams bounds Config.Streams: each stream costs two goroutines
	// and a share of the flow-control budget.
	MaxStreams = 64
	// MaxClientIDLength bounds Config.ClientID.
	MaxClientIDLength = 256
)

// Config configures Subscribe. The zero value of every field but
// Subscription means the documented default.
type Config struct {
	// Subscription is the full name "projects/P/subscriptions/S".
	Subscription string

	// StreamAckDeadline is the ack deadline the server applies to messages
	// delivered on the streams, in whole seconds (rounded up). 0 means 60 s;
	// otherwise 10–600 s. SetStreamAckDeadline changes it later.
	StreamAckDeadline time.Duration

	// ClientID identifies this subscriber to the server across streams and
	// reconnects (the server uses it to keep ordering and flow-control
	// state). "" means a random id drawn once per Subscribe call.
	ClientID string

	// MaxOutstandingMessages and MaxOutstandingBytes are the server-side
	// flow-control limits of the subscription, divided among the streams.
	// 0 means 1000 messages and 100 MiB; a negative value means unlimited
	// (0 on the wire).
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

	// Backoff is the reconnect delay policy; nil means
	// RandomizedExponential(100 ms, 60 s). Each stream runs its own
	// sequence, reset after a healthy stream.
	Backoff Backoff

	// Classify decides whether a stream failure is retried; nil means
	// DefaultClassifier.
	Classify Classifier

	// ReconnectTimeout bounds how long a stream may keep failing (an
	// endpoint that never answers, a network that is down) without one
	// healthy stream: after it, the next failed attempt ends the Source
	// with an *UnreachableError carrying the last status. Every attempt
	// before it is reported to Events and the Logger. 0 means
	// DefaultReconnectTimeout (2 min); RetryForever never gives up.
	ReconnectTimeout time.Duration

	// Prefetch is how many decoded messages the streams may hold, together,
	// ahead of the consumer's demand, so a stream keeps reading (and
	// OnReceive keeps leasing) while the pipeline is busy; past it, reads
	// stop and backpressure reaches the server. 0 means none: Recv only on
	// demand. Set it only with an OnReceive that leases, or prefetched
	// messages would wait unleased.
	Prefetch int

	// OnReceive, if set, runs for each message on its stream's goroutine
	// as soon as it is decoded, before it is handed on (a subscriber binds
	// its settle path there, without a stage of its own). It must not block.
	OnReceive func(m *message.Message)

	// Unsent, if set, receives the messages of a response that were never
	// handed on because the source was cancelled mid-response, so their
	// owner can nack them instead of leaving them to the stream deadline.
	// It runs on the stream's goroutine and must not block.
	Unsent func(ms []*message.Message)

	// Events receives telemetry (connect, disconnect, connect failure,
	// reconnect, terminal error, heartbeat, messages received).
	Events event.Func

	// Logger receives debug lines about stream lifecycle; nil discards them.
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
	if c.Prefetch < 0 {
		return fmt.Errorf("pubsubflow/source: Prefetch %d must not be negative", c.Prefetch)
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
	if c.ReconnectTimeout < 0 && c.ReconnectTimeout != RetryForever {
		return fmt.Errorf("pubsubflow/source: ReconnectTimeout %v must be ≥ 0 (0 means %v) or RetryForever", c.ReconnectTimeout, DefaultReconnectTimeout)
	}
	return nil
}

// validSubscription checks "projects/P/subscriptions/S" with non-empty,
// slash-free P and S.
func validSubscription(s string) error {
	if s == "" {
		return errors.New("pubsubflow/source: Subscription is empty; want projects/P/subscriptions/S")
	}
	parts := strings.Split(s, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != "subscriptions" || parts[1] == "" || parts[3] == "" {
		return fmt.Errorf("pubsubflow/source: Subscription %q is not of the form projects/P/subscriptions/S", s)
	}
	return nil
}

// withDefaults returns c with every zero value replaced by its default. It
// does not fill ClientID: Subscribe draws it.
func (c Config) withDefaults() Config {
	if c.StreamAckDeadline == 0 {
		c.StreamAckDeadline = DefaultStreamAckDeadline
	}
	if c.MaxOutstandingMessages == 0 {
		c.MaxOutstandingMessages = DefaultMaxOutstandingMessages
	}
	if c.MaxOutstandingBytes == 0 {
		c.MaxOutstandingBytes = DefaultMaxOutstandingBytes
	}
	if c.Streams == 0 {
		c.Streams = DefaultStreams
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ReconnectTimeout == 0 {
		c.ReconnectTimeout = DefaultReconnectTimeout
	}
	if c.Backoff == nil {
		c.Backoff = RandomizedExponential(DefaultBackoffMin, DefaultBackoffMax)
	}
	if c.Classify == nil {
		c.Classify = DefaultClassifier
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
