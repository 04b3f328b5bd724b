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
	"github.com/pubsubflow/pubsubflow/internal/testfix"
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

// trkSettler is the tests' settle path: an ack goes to the server through
// the client directly (the acknowledger lives in another package), then
// the lease is released. Every outcome is counted.
type trkSettler struct {
	ext      *Extender
	client   pubsubpb.SubscriberClient // nil: send nothing
	outcomes sync.Map                  // *message.Message → message.Outcome
	acked    atomic.Int64
}

func (s *trkSettler) Settle(m *message.Message, o message.Outcome, _ time.Duration) {
	s.outcomes.Store(m, o)
	if o == message.Ack && s.client != nil {
		if _, err := s.client.Acknowledge(context.Background(), &pubsubpb.AcknowledgeRequest{Subscription: m.Subscription, AckIds: []string{m.AckID}}); err == nil {
			s.acked.Add(1)
		}
	}
	s.ext.Release(m, o)
}

func (s *trkSettler) outcome(m *message.Message) message.Outcome {
	o, _ := s.outcomes.Load(m)
	o2, _ := o.(message.Outcome)
	return o2
}

// trkBind binds every message to s on its way through (what the
// Subscriber does on receipt).
func trkBind(s message.Settler) stage.Flow[*message.Message, *message.Message] {
	return pipeline.Filter(func(m *message.Message) bool { message.Bind(m, s); return true }, nil)
}

func trkMessages(n int, s message.Settler) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		out[i] = &message.Message{ID: fmt.Sprint(i + 1), AckID: fmt.Sprint(i + 1), Subscription: "projects/p/subscriptions/sub", ReceiveTime: time.Now()}
		if s != nil {
			message.Bind(out[i], s)
		}
	}
	return out
}

func trkExtender(t *testing.T, client pubsubpb.SubscriberClient, sub string, cfg ExtenderConfig) *Extender {
	t.Helper()
	ext, err := NewExtender(client, sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Close() })
	return ext
}

// trkNaiveTrack is the demand-driven tracker, built with go-streams:
// a flow.NewMap that tracks as elements pass through it, so it tracks only
// when downstream pulls.
func trkNaiveTrack(ext *Extender) stage.Flow[*message.Message, *message.Message] {
	return pipeline.Streams[*message.Message, *message.Message](func(_ *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewMap(func(m *message.Message) *message.Message {
			ext.Track(m)
			return m
		}, 1))
	}, pipeline.StreamsOptions[*message.Message]{})
}

// trkBlocked is ParallelMap(1) whose handler never returns (until the
// pipeline is cancelled): a handler stuck on its first message.
func trkBlocked() stage.Flow[*message.Message, *message.Message] {
	return operators.ParallelMap(1, func(ctx context.Context, m *message.Message) (*message.Message, error) {
		<-ctx.Done()
		return m, ctx.Err()
	}, operators.Options[*message.Message, *message.Message]{})
}

func trkDiscard() stage.Sink[*message.Message] {
	return pipeline.ForEach(func(context.Context, *message.Message) error { return nil })
}

// runStuckDownstream receives 10 messages with downstream
// ParallelMap(1) blocked forever, extension interval 200 ms; it returns the
// ack ids of the first extension request.
func runStuckDownstream(t *testing.T, track func(*Extender) stage.Flow[*message.Message, *message.Message]) []string {
	t.Helper()
	var first []string
	synctest.Test(t, func(t *testing.T) {
		stub := &trkStub{}
		ext := trkExtender(t, stub, "projects/p/subscriptions/sub", ExtenderConfig{Strategy: Fixed(200*time.Millisecond, time.Second)})
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
	got := runStuckDownstream(t, func(ext *Extender) stage.Flow[*message.Message, *message.Message] { return EagerTrack(ext, 0) })
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

// trkE2E is the end-to-end scenario against pubsubtest over bufconn in
// virtual time: backlog 200, handler 300 ms, parallelism 4, stream ack
// deadline 10 s; it returns the subscription's counters once every
// message was acked.
func trkE2E(t *testing.T, track func(*Extender) stage.Flow[*message.Message, *message.Message]) pubsubtest.SubStats {
	t.Helper()
	var stats pubsubtest.SubStats
	synctest.Test(t, func(t *testing.T) {
		f := trkNewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: 10 * time.Second})
		f.publish(t, 200)
		ext := trkExtender(t, f.client, f.sub, ExtenderConfig{StreamAckDeadline: 10 * time.Second})
		s := &trkSettler{ext: ext, client: f.client}
		src, err := source.Subscribe(f.client, source.Config{Subscription: f.sub, StreamAckDeadline: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		handler := operators.ParallelMap(4, func(ctx context.Context, m *message.Message) (*message.Message, error) {
			select {
			case <-time.After(300 * time.Millisecond):
				m.Ack()
			case <-ctx.Done():
			}
			return m, nil
		}, operators.Options[*message.Message, *message.Message]{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, src).Via(trkBind(s), track(ext), handler).To(trkDiscard())
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
		stats = f.srv.SubscriptionStats(f.sub)
		t.Logf("%v virtual: delivered %d, redelivered %d, expired %d, modacks %d, acked %d",
			time.Since(start).Round(time.Second), stats.Delivered, stats.Redelivered, stats.Expired, stats.ModAcks, stats.Acked)
	})
	return stats
}

// TestEagerTrackEndToEnd: with EagerTrack nothing is redelivered and no
// lease expires, although the last messages wait 15 s behind the handler
// with a 10 s stream ack deadline.
func TestEagerTrackEndToEnd(t *testing.T) {
	st := trkE2E(t, func(ext *Extender) stage.Flow[*message.Message, *message.Message] { return EagerTrack(ext, 0) })
	if st.Redelivered != 0 || st.Expired != 0 {
		t.Fatalf("EagerTrack: redelivered %d, expired %d; want 0 and 0", st.Redelivered, st.Expired)
	}
}

// TestDemandDrivenTrackerRedelivers is the regression guard: the same
// pipeline with the demand-driven tracker (a go-streams Map doing the
// tracking) does redeliver. If this test fails, the scenario stopped
// exposing the bug, and TestEagerTrackEndToEnd proves nothing.
func TestDemandDrivenTrackerRedelivers(t *testing.T) {
	st := trkE2E(t, trkNaiveTrack)
	if st.Redelivered == 0 || st.Expired == 0 {
		t.Fatalf("demand-driven tracker: redelivered %d, expired %d; want both > 0", st.Redelivered, st.Expired)
	}
}

// trkFixture is a pubsubtest server on bufconn with one topic and one
// subscription; made inside a synctest bubble it runs in virtual time.
type trkFixture struct {
	fix    *testfix.Fixture
	srv    *pubsubtest.Server
	client pubsubpb.SubscriberClient
	topic  string
	sub    string
}

func trkNewFixture(t *testing.T, sc pubsubtest.SubscriptionConfig) *trkFixture {
	t.Helper()
	sc.Name = "sub"
	f := testfix.New(t, sc, pubsubtest.WithBufconn())
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
// its stream deadline passes.
func TestEagerTrackExactlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := trkNewFixture(t, pubsubtest.SubscriptionConfig{AckDeadline: 10 * time.Second, EnableExactlyOnceDelivery: true})
		f.publish(t, 5)
		ext := trkExtender(t, f.client, f.sub, ExtenderConfig{StreamAckDeadline: 10 * time.Second})
		s := &trkSettler{ext: ext, client: f.client}
		src, err := source.Subscribe(f.client, source.Config{Subscription: f.sub, StreamAckDeadline: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		f.srv.SetLatency("ModifyAckDeadline", 2*time.Second)
		f.srv.FailNextAckIDs(1, "PERMANENT_FAILURE_INVALID_ACK_ID")
		var (
			mu     sync.Mutex
			handed = map[*message.Message]time.Duration{} // → receipt to hand-off
		)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, src).Via(trkBind(s), EagerTrack(ext, 0)).To(pipeline.ForEach(func(_ context.Context, m *message.Message) error {
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
		mu.Lock()
		defer mu.Unlock()
		ids := map[string]bool{}
		for m, d := range handed {
			ids[m.ID] = true
			if d < 2*time.Second {
				t.Fatalf("message %s (attempt %d) handed on %v after receipt, before its 2 s receipt modack returned", m.ID, m.DeliveryAttempt, d)
			}
		}
		var dropped []*message.Message
		s.outcomes.Range(func(m, o any) bool {
			if o.(message.Outcome) == message.Expired {
				dropped = append(dropped, m.(*message.Message))
			}
			return true
		})
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
	})
}

// TestEagerTrackSkipsSettledWhileBuffered: messages whose leases pass the
// maximum extension while they wait behind a blocked handler are settled
// as Expired by the extender and skipped, not handed to the handler.
func TestEagerTrackSkipsSettledWhileBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stub := &trkStub{}
		ext := trkExtender(t, stub, "projects/p/subscriptions/sub", ExtenderConfig{StreamAckDeadline: 10 * time.Second, MaxExtension: 30 * time.Second})
		s := &trkSettler{ext: ext}
		msgs := trkMessages(5, s)
		release := make(chan struct{})
		var seen atomic.Int64
		handler := operators.ParallelMap(1, func(ctx context.Context, m *message.Message) (*message.Message, error) {
			seen.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return m, nil
		}, operators.Options[*message.Message, *message.Message]{})
		err := make(chan error, 1)
		go func() {
			err <- pipeline.From(pipeline.Slice(msgs...)).Via(EagerTrack(ext, 0), handler).To(trkDiscard())
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		if seen.Load() != 1 || ext.Len() != 0 {
			t.Fatalf("handler saw %d, leases %d", seen.Load(), ext.Len())
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
			if o := s.outcome(m); o != message.Expired {
				t.Fatalf("message %s: %v, want expired", m.ID, o)
			}
		}
	})
}

// TestEagerTrackBound: with downstream blocked the stage holds at most
// maxBuffer messages, tracks exactly what it received, and stops
// receiving (backpressure).
func TestEagerTrackBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ext := trkExtender(t, &trkStub{}, "projects/p/subscriptions/sub", ExtenderConfig{})
		var sent, most atomic.Int64
		src := stage.SourceFunc[*message.Message](func(g *stage.Group) <-chan *message.Message {
			out := make(chan *message.Message)
			g.Go(func(ctx context.Context) error {
				defer close(out)
				for _, m := range trkMessages(100, nil) {
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
		tr := &Tracker{Extender: ext, MaxBuffer: 5, Observe: func(n int) {
			if int64(n) > most.Load() {
				most.Store(int64(n))
			}
		}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- pipeline.FromContext(ctx, src).Via(tr, trkBlocked()).To(trkDiscard()) }()
		time.Sleep(time.Second)
		synctest.Wait()
		// 5 buffered + 1 in the blocked handler.
		if most.Load() != 5 || sent.Load() != 6 || ext.Len() != 6 {
			t.Fatalf("buffered at most %d, sent %d, tracked %d; want 5, 6, 6", most.Load(), sent.Load(), ext.Len())
		}
		cancel()
		<-done
		if ext.Len() != 6 || len(ext.Leased()) != 6 {
			t.Fatalf("cancel changed the leases (%d): OnDrop must leave them to the Subscriber", ext.Len())
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
		ext := trkExtender(t, stub, "projects/p/subscriptions/sub", ExtenderConfig{Strategy: Fixed(200*time.Millisecond, time.Second)})
		graph := pipeline.Streams[*message.Message, *message.Message](func(g *stage.Group, in streams.Source) streams.Outlet {
			return in.Via(gsflow.NewPassThrough()).Via(pipeline.NewStreamsFlow(g, EagerTrack(ext, 0))).Via(gsflow.NewPassThrough())
		}, pipeline.StreamsOptions[*message.Message]{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- pipeline.FromContext(ctx, pipeline.Slice(trkMessages(10, nil)...)).Via(graph, trkBlocked()).To(trkDiscard())
		}()
		time.Sleep(800 * time.Millisecond)
		synctest.Wait()
		if ext.Len() != 10 {
			t.Fatalf("tracked %d of 10 inside the go-streams graph", ext.Len())
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("pipeline: %v", err)
		}
	})
}
