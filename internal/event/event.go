// Package event is the one vocabulary in which pubsubflow's stages report
// what happened (connections, heartbeats, leases, acks). Stages call a
// Func; the Subscriber turns events into log lines, OpenTelemetry metrics
// and its Stats snapshot. A nil Func costs one nil check.
package event

import (
	"context"
	"log/slog"
	"time"
)

// Kind names what happened.
type Kind string

// Event kinds. Count, Deadline, Delay and Err are set where they apply.
const (
	Connect           Kind = "connect"               // a stream opened (Stream)
	Disconnect        Kind = "disconnect"            // a stream ended (Stream, Err = reason)
	ConnectFailed     Kind = "connect_failed"        // opening a stream failed (Err)
	Reconnect         Kind = "reconnect"             // a stream will reopen after Delay
	Terminal          Kind = "terminal"              // the source gives up (Err)
	Heartbeat         Kind = "heartbeat"             // a heartbeat was sent (Stream)
	Received          Kind = "received"              // Count messages received in one response
	Extend            Kind = "extend"                // Count leases extended to Deadline
	Expired           Kind = "expired"               // Count leases dropped past max extension
	ReceiptModackFail Kind = "receipt_modack_failed" // Count receipt modacks failed (Err)
	Ack               Kind = "ack"                   // Count acks sent and accepted
	Nack              Kind = "nack"                  // Count nacks (modack 0 or delayed) sent
	AckFailed         Kind = "ack_failed"            // Count ack ids failed permanently (Err)
	Retry             Kind = "retry"                 // an RPC is retried after Delay (Err)
)

// Event is one report. Fields that do not apply are zero.
type Event struct {
	Kind         Kind
	Subscription string
	Stream       int
	Count        int
	Deadline     time.Duration
	Delay        time.Duration
	Err          error
}

// Func receives events. It is called on the reporting stage's goroutine
// and must not block.
type Func func(Event)

// Emit calls f with e unless f is nil.
func (f Func) Emit(e Event) {
	if f != nil {
		f(e)
	}
}

// Log writes e to l (nil: nowhere) at the level its kind deserves:
// failures at Warn or Error, connects at Info, the rest at Debug.
func Log(l *slog.Logger, e Event) {
	if l == nil {
		return
	}
	level := slog.LevelDebug
	switch e.Kind {
	case Disconnect, ConnectFailed, Reconnect, Expired, Retry:
		level = slog.LevelWarn
	case Terminal, AckFailed, ReceiptModackFail:
		level = slog.LevelError
	case Connect:
		level = slog.LevelInfo
	}
	if !l.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{slog.String("subscription", e.Subscription)}
	if e.Count != 0 {
		attrs = append(attrs, slog.Int("count", e.Count))
	}
	if e.Stream != 0 {
		attrs = append(attrs, slog.Int("stream", e.Stream))
	}
	if e.Deadline != 0 {
		attrs = append(attrs, slog.Duration("deadline", e.Deadline))
	}
	if e.Delay != 0 {
		attrs = append(attrs, slog.Duration("delay", e.Delay))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.Any("error", e.Err))
	}
	l.LogAttrs(context.Background(), level, "pubsubflow: "+string(e.Kind), attrs...)
}
