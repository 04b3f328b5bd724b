package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow"
)

// settings are what the clients under comparison share.
type settings struct {
	outstanding int // max outstanding messages (client and server side)
	streams     int
}

// byteBudget is the max outstanding bytes every client gets: ours's
// default (Google's default is 1e9).
const byteBudget = 100 << 20 // SubscriberConfig.MaxOutstandingBytes' default

// ourParallelism is the number of handler workers our Subscriber runs.
// Google's client runs one goroutine per outstanding message instead.
const ourParallelism = 8

// client consumes the target's subscription until ctx is done, calling
// handled once for each message its handler processed, and then shuts
// down cleanly.
type client struct {
	name string
	run  func(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error
}

// target is the server a client consumes from: in this process (env) or
// in a child process (feedServer).
type target interface {
	dial(tb testing.TB) *grpc.ClientConn
	subscription() string
	project() string
}

var clients = []client{
	{"ours", runOurs},
	{"google", runGoogle},
	{"raw", runRaw},
}

// runOurs is pubsubflow's Subscriber with the default composition and a
// trivial handler (returning nil acks).
func runOurs(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
	cc := e.dial(tb)
	defer cc.Close()
	sub, err := pubsubflow.NewSubscriber(context.Background(), e.subscription(), pubsubflow.SubscriberConfig{
		Conn:                   cc,
		MaxOutstandingMessages: int64(s.outstanding),
		MaxOutstandingBytes:    byteBudget,
		Streams:                s.streams,
	})
	if err != nil {
		return err
	}
	return sub.Run(ctx, ourParallelism, func(context.Context, *pubsubflow.Message) error {
		handled()
		return nil
	})
}

// runGoogle is Google's Subscriber.Receive with the same limits and
// number of streams, acking in the handler.
func runGoogle(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
	return receiveGoogle(ctx, tb, e, s, handled, nil)
}

// receiveGoogle is runGoogle with a client config (nil: the defaults).
func receiveGoogle(ctx context.Context, tb testing.TB, e target, s settings, handled func(), cfg *pubsub.ClientConfig) error {
	c, err := pubsub.NewClientWithConfig(context.Background(), e.project(), cfg, option.WithGRPCConn(e.dial(tb)))
	if err != nil {
		return err
	}
	defer c.Close()
	sub := c.Subscriber(e.subscription())
	sub.ReceiveSettings.MaxOutstandingMessages = s.outstanding
	sub.ReceiveSettings.MaxOutstandingBytes = byteBudget
	sub.ReceiveSettings.NumGoroutines = s.streams
	return sub.Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		handled()
	})
}

// Raw loop parameters: acks go out every rawAckEvery, or as soon as
// rawAckBatch are waiting, in Acknowledge requests of at most rawAckBatch.
const (
	rawAckEvery = 5 * time.Millisecond
	rawAckBatch = 1000
)

// runRaw is the ceiling: one StreamingPull stream per settings.streams
// with server-side flow control only, the handler inline in the receive
// loop, and acks batched by unary Acknowledge. No lease management, no
// client-side flow control, no stages.
func runRaw(ctx context.Context, tb testing.TB, e target, s settings, handled func()) error {
	cc := e.dial(tb)
	defer cc.Close()
	client := pubsubpb.NewSubscriberClient(cc)
	a := &rawAcker{client: client, sub: e.subscription(), full: make(chan struct{}, 1)}
	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		a.run(ctx)
	}()
	var wg sync.WaitGroup
	errs := make([]error, s.streams)
	for i := range s.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rawStream(ctx, client, e.subscription(), int64(s.outstanding/s.streams), a, handled)
		}()
	}
	wg.Wait()
	<-ackDone
	return errors.Join(errs...)
}

func rawStream(ctx context.Context, client pubsubpb.SubscriberClient, sub string, outstanding int64, a *rawAcker, handled func()) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.StreamingPull(sctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&pubsubpb.StreamingPullRequest{
		Subscription:             sub,
		StreamAckDeadlineSeconds: 60,
		MaxOutstandingMessages:   outstanding,
		MaxOutstandingBytes:      byteBudget,
	}); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ids := make([]string, 0, len(resp.ReceivedMessages))
		for _, m := range resp.ReceivedMessages {
			handled()
			ids = append(ids, m.AckId)
		}
		a.add(ids)
	}
}

// rawAcker batches ack ids and sends them every rawAckEvery or when a
// full request is waiting.
type rawAcker struct {
	client pubsubpb.SubscriberClient
	sub    string
	full   chan struct{}

	mu      sync.Mutex
	pending []string
}

func (a *rawAcker) add(ids []string) {
	a.mu.Lock()
	a.pending = append(a.pending, ids...)
	n := len(a.pending)
	a.mu.Unlock()
	if n >= rawAckBatch {
		select {
		case a.full <- struct{}{}:
		default:
		}
	}
}

func (a *rawAcker) run(ctx context.Context) {
	t := time.NewTicker(rawAckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// The benchmark cancels only after the server saw every ack;
			// whatever is left (none) is dropped.
			return
		case <-t.C:
		case <-a.full:
		}
		a.mu.Lock()
		ids := a.pending
		a.pending = nil
		a.mu.Unlock()
		for len(ids) > 0 {
			n := min(len(ids), rawAckBatch)
			_, _ = a.client.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: a.sub, AckIds: ids[:n]})
			ids = ids[n:]
		}
	}
}
