package bench

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/examples/naive"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// The slow-consumer scenario: a backlog of slowBacklog messages, a handler
// that takes slowHandler, slowParallelism handlers at once, and a stream
// ack deadline of slowDeadline, well below backlog × handler time ÷
// parallelism (15 s). Every client gets the default limits (1,000
// outstanding), so the whole backlog is delivered at once and waits behind
// the handlers, its last third for longer than the deadline.
const (
	slowBacklog     = 600
	slowHandler     = 250 * time.Millisecond
	slowParallelism = 10
	slowDeadline    = 10 * time.Second
)

// shape is one consumer of the slow scenario: it runs handle (which takes
// slowHandler) with at most slowParallelism at once until ctx is done,
// acking each message handle returns for.
type shape struct {
	name string
	run  func(ctx context.Context, tb testing.TB, e *env) error
	// linger is how long to wait after run returned for goroutines the
	// client leaves behind to exit (Google's keep-alive ticker).
	linger time.Duration
}

var shapes = []shape{
	{name: "ours", run: slowOurs},
	{name: "google", run: slowGoogle, linger: 11 * time.Second},
	{name: "demand-driven", run: slowNaive},
}

// slowWork is the handler's work: slowHandler, or less if ctx ends.
func slowWork(ctx context.Context) {
	t := time.NewTimer(slowHandler)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func slowOurs(ctx context.Context, tb testing.TB, e *env) error {
	cc := e.dial(tb)
	defer cc.Close()
	s, err := pubsubflow.NewSubscriber(context.Background(), e.sub, pubsubflow.SubscriberConfig{
		Conn:              cc,
		StreamAckDeadline: slowDeadline,
	})
	if err != nil {
		return err
	}
	return s.Run(ctx, slowParallelism, func(ctx context.Context, _ *pubsubflow.Message) error {
		slowWork(ctx)
		return nil
	})
}

// slowGoogle runs Google's client with its defaults; a semaphore in the
// handler holds it to slowParallelism handlers at work, the rest of the
// messages it holds wait (leased) for a slot.
func slowGoogle(ctx context.Context, tb testing.TB, e *env) error {
	c, err := pubsub.NewClient(context.Background(), e.srv.Project(), option.WithGRPCConn(e.dial(tb)))
	if err != nil {
		return err
	}
	defer c.Close()
	slots := make(chan struct{}, slowParallelism)
	return c.Subscriber(e.sub).Receive(ctx, func(ctx context.Context, m *pubsub.Message) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			m.Nack()
			return
		}
		slowWork(ctx)
		<-slots
		m.Ack()
	})
}

// slowNaive runs the demand-driven tracker of examples/naive: it leases a
// message only when a handler asks for the next one, so the messages
// waiting in the stream's buffers behind the handlers have no lease and the
// server redelivers those that wait past slowDeadline.
func slowNaive(ctx context.Context, tb testing.TB, e *env) error {
	cc := e.dial(tb)
	defer cc.Close()
	c, err := naive.Start(ctx, pubsubpb.NewSubscriberClient(cc), e.sub, naive.Config{
		Handler:           func(ctx context.Context, _ *pubsubflow.Message) { slowWork(ctx) },
		Parallelism:       slowParallelism,
		StreamAckDeadline: slowDeadline,
	})
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-c.Done():
	}
	return c.Stop()
}

// slowResult is what one shape did to the server in the slow scenario.
type slowResult struct {
	Elapsed     time.Duration
	Delivered   int64
	Redelivered int64
	Expired     int64
}

// runSlow runs one shape through the scenario on a server made with opts
// and returns the server's counters once every message was acked.
func runSlow(tb testing.TB, sh shape, opts ...pubsubtest.Option) slowResult {
	tb.Helper()
	e := newEnv(tb, slowDeadline, opts...)
	e.publish(tb, slowBacklog, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- sh.run(ctx, tb, e) }()
	for {
		st := e.stats()
		if st.Acked == slowBacklog && st.Outstanding == 0 && st.Backlog == 0 {
			break
		}
		select {
		case err := <-done:
			tb.Fatalf("%s stopped early: %v (%+v)", sh.name, err, st)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > 10*time.Minute {
			tb.Fatalf("%s: not done after 10 minutes: %+v", sh.name, st)
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		tb.Fatalf("%s: %v", sh.name, err)
	}
	st := e.stats()
	return slowResult{Elapsed: elapsed, Delivered: st.Delivered, Redelivered: st.Redelivered, Expired: st.Expired}
}

// TestSlowConsumer runs the slow-consumer scenario in virtual time (bufconn
// inside a synctest bubble): ours and Google's client redeliver nothing and
// let no lease expire; the demand-driven shape does both, which proves the
// scenario still shows what goes wrong when leases are taken only when a
// handler pulls the message.
func TestSlowConsumer(t *testing.T) {
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			var r slowResult
			synctest.Test(t, func(t *testing.T) {
				r = runSlow(t, sh, pubsubtest.WithBufconn(), pubsubtest.WithHeartbeatDelay(time.Millisecond))
				time.Sleep(sh.linger)
			})
			t.Logf("%s: %v virtual; delivered %d, redelivered %d, expired %d", sh.name, r.Elapsed.Round(time.Millisecond), r.Delivered, r.Redelivered, r.Expired)
			naive := sh.name == "demand-driven"
			if !naive && (r.Redelivered != 0 || r.Expired != 0) {
				t.Errorf("%s: redelivered %d, expired %d; want 0 and 0", sh.name, r.Redelivered, r.Expired)
			}
			if naive && (r.Redelivered == 0 || r.Expired == 0) {
				t.Errorf("demand-driven: redelivered %d, expired %d; want both > 0 (else the scenario proves nothing)", r.Redelivered, r.Expired)
			}
		})
	}
}

// BenchmarkSlowConsumer is the same scenario in real time over loopback
// TCP (about 15–25 s per shape); it reports the server's redeliveries and
// expirations per run.
//
//	go test -run '^$' -bench SlowConsumer -benchtime 1x ./bench/
func BenchmarkSlowConsumer(b *testing.B) {
	for _, sh := range shapes {
		b.Run("shape="+sh.name, func(b *testing.B) {
			var sum slowResult
			for range b.N {
				r := runSlow(b, sh)
				sum.Elapsed += r.Elapsed
				sum.Redelivered += r.Redelivered
				sum.Expired += r.Expired
				sum.Delivered += r.Delivered
			}
			n := float64(b.N)
			b.ReportMetric(float64(sum.Redelivered)/n, "redelivered/op")
			b.ReportMetric(float64(sum.Expired)/n, "expired/op")
			b.ReportMetric(float64(sum.Delivered)/n, "delivered/op")
			b.ReportMetric(sum.Elapsed.Seconds()/n, "s/op")
		})
	}
}
