package flow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// The helpers of this file are prefixed trk: the package's other test
// files belong to FlowGate.

// trkModack is one captured ModifyAckDeadline request.
type trkModack struct {
	at  time.Time
	ids []string
}

// trkStub is a capturing client: a SubscriberClient whose
// ModifyAckDeadline records the request and succeeds. Other methods are
// not implemented (nil embedded interface).
type trkStub struct {
	pubsubpb.SubscriberClient
	mu   sync.Mutex
	reqs []trkModack
}

func (c *trkStub) ModifyAckDeadline(_ context.Context, req *pubsubpb.ModifyAckDeadlineRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, trkModack{at: time.Now(), ids: slices.Clone(req.AckIds)})
	return &emptypb.Empty{}, nil
}

// extensions returns the requests sent after the receipt modacks (which go
// out within a few milliseconds of receipt, at virtual time 0 here).
func (c *trkStub) extensions(after time.Time) []trkModack {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []trkModack
	for _, r := range c.reqs {
		if r.at.After(after) {
			out = append(out, r)
		}
	}
	return out
}

// trkSub is the subscription of the hand-made messages.
const trkSub = "projects/p/subscriptions/sub"

// trkHold is a receipt step that attaches a (recording each message's
// outcome) to every message a source decodes.
type trkHold struct{ a *acker }

func (h trkHold) Receipt(message.Key) source.Receipt {
	return source.Receipt{Receive: func(_ int, ms []*source.Message) {
		for _, m := range ms {
			h.a.hold(m)
		}
	}}
}

// trkMessages returns n hand-made messages received now, each held by a
// (nil: none).
func trkMessages(n int, a *acker) []*source.Message {
	out := make([]*source.Message, n)
	for i := range out {
		out[i] = &source.Message{ID: fmt.Sprint(i + 1), AckID: fmt.Sprint(i + 1), Subscription: trkSub, ReceiveTime: time.Now()}
		if a != nil {
			a.hold(out[i])
		}
	}
	return out
}

func trkExtender(t *testing.T, client pubsubpb.SubscriberClient, cfg ExtenderConfig) *Extender {
	t.Helper()
	ext, err := NewExtender(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Close() })
	return ext
}

// trkNaiveTrack is the demand-driven tracker, built with go-streams:
// a flow.NewMap that tracks as elements pass through it, so it tracks only
// when downstream pulls.
func trkNaiveTrack(ext *Extender) stage.Flow[*source.Message, *source.Message] {
	return pipeline.Streams[*source.Message, *source.Message](func(_ *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewMap(func(m *source.Message) *source.Message {
			ext.track(one(m))
			return m
		}, 1))
	}, pipeline.StreamsOptions[*source.Message]{})
}

// trkBlocked is ParallelMap(1) whose handler never returns (until the
// pipeline is cancelled): a handler stuck on its first message.
func trkBlocked() stage.Flow[*source.Message, *source.Message] {
	return operators.ParallelMap(1, func(ctx context.Context, m *source.Message) (*source.Message, error) {
		<-ctx.Done()
		return m, ctx.Err()
	})
}

func trkDiscard() stage.Sink[*source.Message] {
	return pipeline.ForEach(func(context.Context, *source.Message) error { return nil })
}

// runStuckDownstream receives 10 messages with downstream
// ParallelMap(1) blocked forever, extension interval 200 ms; it returns the
// ack ids of the first extension request.
func runStuckDownstream(t *testing.T, track func(*Extender) stage.Flow[*source.Message, *source.Message]) []string {
	t.Helper()
	var first []string
	synctest.Test(t, func(t *testing.T) {
		stub := &trkStub{}
		ext := trkExtender(t, stub, ExtenderConfig{Strategy: Fixed(200*time.Millisecond, time.Second)})
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, pipeline.Slice(trkMessages(10, nil)...)).
				Via(track(ext), trkBlocked()).To(trkDiscard())
		}()
		time.Sleep(800 * time.Millisecond)
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("pipeline: %v", err)
		}
		exts := stub.extensions(start.Add(100 * time.Millisecond))
		if len(exts) == 0 {
			t.Fatal("no extension request within 800 ms")
		}
		first = exts[0].ids
	})
	return first
}

// TestEagerTrackExtendsEveryReceivedMessage: tracking on receipt leases
// what waits in buffers:
// with EagerTrack the first extension request names all 10 ack ids,
// although downstream took only one.
func TestEagerTrackExtendsEveryReceivedMessage(t *testing.T) {
	got := runStuckDownstream(t, func(ext *Extender) stage.Flow[*source.Message, *source.Message] { return EagerTrack(ext, 0) })
	slices.Sort(got)
	want := make([]string, 10)
	for i := range want {
		want[i] = fmt.Sprint(i + 1)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("first extension names %v, want all of %v", got, want)
	}
}

// TestDemandDrivenTrackerMisses shows the bug itself: a go-streams Map
// doing the tracking names only what downstream pulled.
func TestDemandDrivenTrackerMisses(t *testing.T) {
	got := runStuckDownstream(t, trkNaiveTrack)
	if len(got) >= 10 {
		t.Fatalf("the demand-driven tracker extended %d leases; the reproduction no longer reproduces", len(got))
	}
	t.Logf("demand-driven tracker: first extension names %d of 10", len(got))
}

// trkWire is how a test puts tracking after a source: it returns the
// pipeline up to the handler.
type trkWire func(ctx context.Context, src *source.Source, ext *Extender) pipeline.Pipeline[*source.Message]

// trkFused leases as the source's receipt step (EagerTrack fused into the
// source, as a Subscriber composes it).
func trkFused(ctx context.Context, src *source.Source, ext *Extender) pipeline.Pipeline[*source.Message] {
	return pipeline.FromContext(ctx, src.With(EagerTrack(ext, 0)))
}

// trkStage runs EagerTrack as a standalone eager stage right behind the
// source (a pass-through in between keeps it from being fused).
func trkStage(ctx context.Context, src *source.Source, ext *Extender) pipeline.Pipeline[*source.Message] {
	pass := pipeline.Filter(func(*source.Message) bool { return true }, func(m *source.Message) { m.Nack() })
	return pipeline.FromContext(ctx, src).Via(pass, EagerTrack(ext, 0))
}

// trkNaive is the demand-driven tracker behind the source.
func trkNaive(ctx context.Context, src *source.Source, ext *Extender) pipeline.Pipeline[*source.Message] {
	return pipeline.FromContext(ctx, src).Via(trkNaiveTrack(ext))
}

// trkE2E is the end-to-end scenario against pubsubtest over bufconn in
// virtual time: backlog 200, handler 300 ms, parallelism 4, stream ack
// deadline 10 s; acks go through the source's settle path. It returns the
// subscription's counters once every message was acked.
func trkE2E(t *testing.T, wire trkWire) pubsubtest.SubStats {
	t.Helper()
	var stats pubsubtest.SubStats
	synctest.Test(t, func(t *testing.T) {
		f := trkNewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: 10 * time.Second})
		f.publish(t, 200)
		ext := trkExtender(t, f.client, ExtenderConfig{StreamAckDeadline: 10 * time.Second})
		src, err := source.Subscribe(f.client, source.Config{Subscription: f.sub, StreamAckDeadline: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		handler := operators.ParallelMap(4, func(ctx context.Context, m *source.Message) (*source.Message, error) {
			select {
			case <-time.After(300 * time.Millisecond):
				m.Ack()
			case <-ctx.Done():
			}
			return m, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- wire(ctx, src, ext).Via(handler).To(trkDiscard())
		}()
		start := time.Now()
		for {
			st := f.srv.SubscriptionStats(f.sub)
			if st.Acked == 200 && st.Outstanding == 0 && st.Backlog == 0 {
				break
			}
			if time.Since(start) > 5*time.Minute {
				t.Fatalf("not all acked after 5 virtual minutes: %+v", st)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("pipeline: %v", err)
		}
		if err := src.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		stats = f.srv.SubscriptionStats(f.sub)
		t.Logf("%v virtual: delivered %d, redelivered %d, expired %d, modacks %d, acked %d",
			time.Since(start).Round(time.Second), stats.Delivered, stats.Redelivered, stats.Expired, stats.ModAcks, stats.Acked)
	})
	return stats
}

// TestEagerTrackEndToEnd: with EagerTrack, as the source's receipt step or
// as a stage right behind it, nothing is redelivered and no lease expires,
// although the last messages wait 15 s behind the handler with a 10 s
// stream ack deadline.
func TestEagerTrackEndToEnd(t *testing.T) {
	for name, wire := range map[string]trkWire{"receipt step": trkFused, "stage": trkStage} {
		t.Run(name, func(t *testing.T) {
			st := trkE2E(t, wire)
			if st.Redelivered != 0 || st.Expired != 0 {
				t.Fatalf("EagerTrack: redelivered %d, expired %d; want 0 and 0", st.Redelivered, st.Expired)
			}
		})
	}
}

// TestDemandDrivenTrackerRedelivers is the regression guard: the same
// pipeline with the demand-driven tracker (a go-streams Map doing the
// tracking) does redeliver. If this test fails, the scenario stopped
// exposing the bug, and TestEagerTrackEndToEnd proves nothing.
func TestDemandDrivenTrackerRedelivers(t *testing.T) {
	st := trkE2E(t, trkNaive)
	if st.Redelivered == 0 || st.Expired == 0 {
		t.Fatalf("demand-driven tracker: redelivered %d, expired %d; want both > 0", st.Redelivered, st.Expired)
	}
}

// trkFixture is a pubsubtest server on bufconn with one topic and one
// subscription; made inside a synctest bubble it runs in virtual time.
type trkFixture struct {
	fix    *pubsubtest.Fixture
	srv    *pubsubtest.Server
	client pubsubpb.SubscriberClient
	topic  string
	sub    string
}

func trkNewFixture(t *testing.T, sc pubsubtest.SubscriptionConfig) *trkFixture {
	t.Helper()
	sc.Name = "sub"
	f := pubsubtest.NewFixture(t, sc, pubsubtest.WithBufconn())
	return &trkFixture{fix: f, srv: f.Server, client: f.Subscriber, topic: f.Topic, sub: f.Sub}
}

func (f *trkFixture) publish(t *testing.T, n int) {
	t.Helper()
	f.fix.Backlog(t, n)
}

// TestEagerTrackExactlyOnce: on an exactly-once subscription a message is
// handed on only after its receipt modack was confirmed (the modack takes
// 2 s here), and a message whose receipt modack failed permanently is not
// handed on: it is settled as Expired, and the server redelivers it when
// its stream deadline passes. Both as the source's receipt step and as a
// stage.
func TestEagerTrackExactlyOnce(t *testing.T) {
	for name, wire := range map[string]trkWire{"receipt step": trkFused, "stage": trkStage} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { trkExactlyOnce(t, wire) })
		})
	}
}

func trkExactlyOnce(t *testing.T, wire trkWire) {
	f := trkNewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: 10 * time.Second, EnableExactlyOnceDelivery: true})
	f.publish(t, 5)
	ext := trkExtender(t, f.client, ExtenderConfig{StreamAckDeadline: 10 * time.Second})
	a := newAcker(nil) // records outcomes; the source sends the acks
	src, err := source.Subscribe(f.client, source.Config{Subscription: f.sub, StreamAckDeadline: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.SetLatency("ModifyAckDeadline", 2*time.Second)
	f.srv.FailNextAckIDs(1, "PERMANENT_FAILURE_INVALID_ACK_ID")
	var (
		mu     sync.Mutex
		handed = map[*source.Message]time.Duration{} // → receipt to hand-off
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- wire(ctx, src.With(trkHold{a}), ext).To(pipeline.ForEach(func(_ context.Context, m *source.Message) error {
			mu.Lock()
			handed[m] = time.Since(m.ReceiveTime)
			mu.Unlock()
			m.Ack()
			return nil
		}))
	}()
	time.Sleep(30 * time.Second)
	synctest.Wait()
	cancel()
	<-done
	if err := src.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	ids := map[string]bool{}
	for m, d := range handed {
		ids[m.ID] = true
		if d < 2*time.Second {
			t.Fatalf("message %s (attempt %d) handed on %v after receipt, before its 2 s receipt modack returned", m.ID, m.DeliveryAttempt, d)
		}
	}
	dropped := a.withOutcome(message.Expired)
	if len(dropped) != 1 {
		t.Fatalf("%d messages dropped, want the 1 whose receipt modack failed", len(dropped))
	}
	if _, ok := handed[dropped[0]]; ok {
		t.Fatalf("message %s handed on although its receipt modack failed", dropped[0].ID)
	}
	st := f.srv.SubscriptionStats(f.sub)
	if len(ids) != 5 || len(handed) != 5 || st.Acked != 5 || st.Redelivered != 1 {
		t.Fatalf("handed on %d copies of %d messages; server acked %d, redelivered %d; want 5, 5, 5, 1",
			len(handed), len(ids), st.Acked, st.Redelivered)
	}
	if n := len(a.withOutcome(message.Ack)); n != 5 {
		t.Fatalf("%d messages acked through their settle path, want 5", n)
	}
}

// TestEagerTrackSkipsSettledWhileBuffered: messages whose leases pass the
// maximum extension while they wait behind a blocked handler are settled
// as Expired by the extender and skipped, not handed to the handler.
func TestEagerTrackSkipsSettledWhileBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stub := &trkStub{}
		ext := trkExtender(t, stub, ExtenderConfig{StreamAckDeadline: 10 * time.Second, MaxExtension: 30 * time.Second})
		a := newAcker(nil)
		msgs := trkMessages(5, a)
		release := make(chan struct{})
		var seen atomic.Int64
		handler := operators.ParallelMap(1, func(ctx context.Context, m *source.Message) (*source.Message, error) {
			seen.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return m, nil
		})
		err := make(chan error, 1)
		go func() {
			err <- pipeline.From(pipeline.Slice(msgs...)).Via(EagerTrack(ext, 0), handler).To(trkDiscard())
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		if seen.Load() != 1 || ext.leaseCount() != 0 {
			t.Fatalf("handler saw %d, leases %d", seen.Load(), ext.leaseCount())
		}
		close(release)
		if e := <-err; e != nil {
			t.Fatal(e)
		}
		// The message the stage was already offering downstream when the
		// leases expired (a send in progress) may still go through; every
		// message behind it is skipped.
		if seen.Load() > 2 {
			t.Fatalf("handler saw %d messages, want the first and at most the one in the hand-off", seen.Load())
		}
		for _, m := range msgs {
			if o := a.outcome(m); o != message.Expired {
				t.Fatalf("message %s: %v, want expired", m.ID, o)
			}
		}
	})
}

// TestEagerTrackBound: with downstream blocked the stage holds at most
// maxBuffer messages, tracks exactly what it received, and stops
// receiving (backpressure). When the pipeline is cancelled it nacks what
// it still buffers, which ends those leases; the message in the handler
// keeps its lease until its owner settles it.
func TestEagerTrackBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ext := trkExtender(t, &trkStub{}, ExtenderConfig{})
		a := newAcker(nil)
		msgs := trkMessages(100, a)
		var sent atomic.Int64
		src := stage.SourceFunc[*source.Message](func(g *stage.Group) <-chan *source.Message {
			out := make(chan *source.Message)
			g.Go(func(ctx context.Context) error {
				defer close(out)
				for _, m := range msgs {
					select {
					case out <- m:
						sent.Add(1)
					case <-ctx.Done():
						return nil
					}
				}
				return nil
			})
			return out
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- pipeline.FromContext(ctx, src).Via(EagerTrack(ext, 5), trkBlocked()).To(trkDiscard()) }()
		time.Sleep(time.Second)
		synctest.Wait()
		// 5 buffered + 1 in the blocked handler.
		if sent.Load() != 6 || ext.leaseCount() != 6 {
			t.Fatalf("sent %d, tracked %d; want 6, 6", sent.Load(), ext.leaseCount())
		}
		cancel()
		<-done
		nacked := a.withOutcome(message.Nack)
		// The handler may take one more from the stage as it stops.
		if n := len(nacked); n < 4 || n > 5 || ext.leaseCount() != 6-n || a.settled() != n {
			t.Fatalf("after cancel: %d nacked, %d settled, %d leases; want 4 or 5 nacked and the rest still leased", n, a.settled(), ext.leaseCount())
		}
		for _, m := range nacked {
			if m == msgs[0] {
				t.Fatal("the handler's message was nacked by the stage")
			}
		}
	})
}

func TestEagerTrackNilExtender(t *testing.T) {
	err := pipeline.From(pipeline.Slice(trkMessages(3, nil)...)).Via(EagerTrack(nil, 0)).To(trkDiscard())
	if !errors.Is(err, errNilExtender) {
		t.Fatalf("err = %v, want errNilExtender", err)
	}
}

// TestEagerTrackInGoStreamsGraph: EagerTrack runs as a go-streams flow
// between go-streams operators (interop like every stage), and still
// tracks everything it received while downstream is blocked.
func TestEagerTrackInGoStreamsGraph(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stub := &trkStub{}
		ext := trkExtender(t, stub, ExtenderConfig{Strategy: Fixed(200*time.Millisecond, time.Second)})
		graph := pipeline.Streams[*source.Message, *source.Message](func(g *stage.Group, in streams.Source) streams.Outlet {
			return in.Via(gsflow.NewPassThrough()).Via(pipeline.NewStreamsFlow(g, EagerTrack(ext, 0))).Via(gsflow.NewPassThrough())
		}, pipeline.StreamsOptions[*source.Message]{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, pipeline.Slice(trkMessages(10, nil)...)).Via(graph, trkBlocked()).To(trkDiscard())
		}()
		time.Sleep(800 * time.Millisecond)
		synctest.Wait()
		if ext.leaseCount() != 10 {
			t.Fatalf("tracked %d of 10 inside the go-streams graph", ext.leaseCount())
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("pipeline: %v", err)
		}
	})
}
