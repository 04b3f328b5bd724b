package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pipeline"
)

// tailDrain bounds how long tail waits, when it stops, for a message being
// printed to settle.
const tailDrain = 5 * time.Second

func tailCommand() *cobra.Command {
	var o tailOptions
	c := newCommand("tail [flags] SUBSCRIPTION", "print a subscription's messages as JSON lines", `
Receives from SUBSCRIPTION (projects/P/subscriptions/S, or S with --project)
and prints one JSON object per message: id, publish_time, attributes,
ordering_key, delivery_attempt, and data as text (valid UTF-8) or
data_base64. Without --ack the messages are held while tail runs (their
leases extended, so each is printed once) and nacked when it stops, so the
subscription keeps them; with --ack each is acked once printed; with --nack
each is nacked once printed, so the subscription redelivers it (each nack
is a failed delivery: after a subscription's --max-delivery-attempts the
message goes to its dead-letter topic).
It stops after --max messages, after --timeout, or on SIGINT/SIGTERM.`, nArgs(1, "SUBSCRIPTION"), func(ctx context.Context, env cliEnv, args []string) error {
		return runTail(ctx, env, args[0], o)
	})
	fs := c.Flags()
	o.ep.register(fs)
	fs.BoolVar(&o.ack, "ack", false, "ack each message once printed (default: nack them all when tail stops)")
	fs.BoolVar(&o.nack, "nack", false, "nack each message once printed: it is redelivered, and counts as a failed delivery")
	fs.IntVar(&o.max, "max", 0, "stop after this many messages (0: no limit)")
	fs.DurationVar(&o.timeout, "timeout", 0, "stop after this long (0: no limit)")
	fs.BoolVar(&o.base64, "base64", false, "always print data as data_base64")
	fs.Int64Var(&o.maxOutstanding, "max-outstanding", 1000, "messages held at once (without --ack, the most tail shows)")
	fs.DurationVar(&o.reconnectTimeout, "reconnect-timeout", 2*time.Minute, // SubscriberConfig.ReconnectTimeout's default
		"fail when no stream has succeeded for this long (an unreachable endpoint); 0: retry until stopped")
	c.ValidArgsFunction = subscriptionResource.complete(&o.ep, true)
	return c
}

type tailOptions struct {
	ep               endpointFlags
	ack              bool
	nack             bool
	max              int
	timeout          time.Duration
	base64           bool
	maxOutstanding   int64
	reconnectTimeout time.Duration
}

func (o *tailOptions) validate() error {
	switch {
	case o.ack && o.nack:
		return usagef("--ack and --nack: want at most one")
	case o.max < 0:
		return usagef("--max %d: want ≥ 0", o.max)
	case o.timeout < 0:
		return usagef("--timeout %v: want ≥ 0", o.timeout)
	case o.maxOutstanding < 1:
		return usagef("--max-outstanding %d: want ≥ 1", o.maxOutstanding)
	case o.reconnectTimeout < 0:
		return usagef("--reconnect-timeout %v: want ≥ 0", o.reconnectTimeout)
	}
	return nil
}

func runTail(ctx context.Context, env cliEnv, name string, o tailOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	conn, sub, err := o.ep.open(ctx, "subscriptions", name)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := pubsubflow.NewSubscriber(ctx, sub, pubsubflow.SubscriberConfig{
		Conn:                   conn,
		MaxOutstandingMessages: o.maxOutstanding,
		// Tail stops on purpose: what it received and did not print goes
		// straight back to the subscription.
		OnShutdown:   pubsubflow.Nack,
		DrainTimeout: tailDrain,
		// The flag's 0, retry until stopped, is the library's Unlimited.
		ReconnectTimeout: cmp.Or(o.reconnectTimeout, pubsubflow.Unlimited),
	})
	if err != nil {
		return err
	}
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, o.timeout)
	}
	defer cancel()

	t := &tailer{tailOptions: o, w: env.stdout, full: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- pipeline.From(s.Source()).To(pipeline.ForEach(t.each)) }()
	var runErr error
	select {
	case <-runCtx.Done():
	case <-t.full:
	case runErr = <-done:
	}
	t.stop()
	closeErr := s.Close()
	if runErr == nil {
		runErr = <-done
	}
	if o.max > 0 && t.count() < o.max && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		fmt.Fprintf(env.stderr, "pubsubflow tail: timeout after %v with %d of %d messages\n", o.timeout, t.count(), o.max)
	}
	return errors.Join(runErr, closeErr)
}

// tailer prints messages and settles them as the options say: ack, nack,
// or hold for Close to nack.
type tailer struct {
	tailOptions
	w io.Writer

	mu       sync.Mutex
	printed  int
	stopping bool
	full     chan struct{} // closed when max messages were printed
}

// tailLine is one printed message.
type tailLine struct {
	ID              string            `json:"id"`
	PublishTime     string            `json:"publish_time"`
	Attributes      map[string]string `json:"attributes,omitempty"`
	OrderingKey     string            `json:"ordering_key,omitempty"`
	DeliveryAttempt int               `json:"delivery_attempt,omitempty"`
	Data            *string           `json:"data,omitempty"`
	DataBase64      *string           `json:"data_base64,omitempty"`
}

func (t *tailer) each(_ context.Context, m *pubsubflow.Message) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping || (t.max > 0 && t.printed >= t.max) {
		// Not shown: left to Close, which nacks it once the streams have
		// ended, so it is not redelivered onto a stream about to close.
		return nil
	}
	line := tailLine{
		ID:              m.ID,
		PublishTime:     m.PublishTime.UTC().Format(time.RFC3339Nano),
		Attributes:      m.Attributes,
		OrderingKey:     m.OrderingKey,
		DeliveryAttempt: m.DeliveryAttempt,
	}
	if !t.base64 && utf8.Valid(m.Data) {
		s := string(m.Data)
		line.Data = &s
	} else {
		s := base64.StdEncoding.EncodeToString(m.Data)
		line.DataBase64 = &s
	}
	if err := json.NewEncoder(t.w).Encode(line); err != nil {
		m.Nack()
		return fmt.Errorf("writing message %s: %w", m.ID, err)
	}
	t.printed++
	switch {
	case t.ack:
		m.Ack()
	case t.nack:
		m.Nack()
	}
	// Otherwise it is held: Close nacks it, after the streams ended.
	if t.max > 0 && t.printed == t.max {
		close(t.full)
	}
	return nil
}

// stop makes tail print nothing more.
func (t *tailer) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopping = true
}

func (t *tailer) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.printed
}
