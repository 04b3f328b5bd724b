package pubsubflow

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/reugn/go-streams"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// failingExtensions is a SubscriberClient that fails every lease
// extension (a ModifyAckDeadline with seconds > 0 of an ack id it has
// modacked before) with UNAVAILABLE, and records when each ack id was
// delivered on a stream.
type failingExtensions struct {
	pubsubpb.SubscriberClient
	mu        sync.Mutex
	modacked  map[string]bool
	delivered map[string][]delivery // message id → deliveries in order
}

type delivery struct {
	ackID string
	at    time.Time
}

func (c *failingExtensions) ModifyAckDeadline(ctx context.Context, in *pubsubpb.ModifyAckDeadlineRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	if in.AckDeadlineSeconds > 0 {
		c.mu.Lock()
		extension := false
		for _, id := range in.AckIds {
			extension = extension || c.modacked[id]
			c.modacked[id] = true
		}
		c.mu.Unlock()
		if extension {
			return nil, status.Error(codes.Unavailable, "test: extensions fail")
		}
	}
	return c.SubscriberClient.ModifyAckDeadline(ctx, in, opts...)
}

func (c *failingExtensions) StreamingPull(ctx context.Context, opts ...grpc.CallOption) (pubsubpb.Subscriber_StreamingPullClient, error) {
	s, err := c.SubscriberClient.StreamingPull(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &watchedStream{Subscriber_StreamingPullClient: s, c: c}, nil
}

type watchedStream struct {
	pubsubpb.Subscriber_StreamingPullClient
	c *failingExtensions
}

func (w *watchedStream) Recv() (*pubsubpb.StreamingPullResponse, error) {
	resp, err := w.Subscriber_StreamingPullClient.Recv()
	if err == nil {
		w.c.mu.Lock()
		for _, rm := range resp.ReceivedMessages {
			id := rm.GetMessage().GetMessageId()
			w.c.delivered[id] = append(w.c.delivered[id], delivery{rm.AckId, time.Now()})
		}
		w.c.mu.Unlock()
	}
	return resp, err
}

// redeliveredBefore reports whether message id was delivered again, under
// another ack id than ackID, before t: the copy ackID was stale then.
func (c *failingExtensions) redeliveredBefore(id, ackID string, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := false
	for _, d := range c.delivered[id] {
		if d.ackID == ackID {
			seen = true
			continue
		}
		if seen && !d.at.After(t) {
			return true
		}
	}
	return false
}

// TestExpiredCopiesNeverReachHandlers: with every lease extension failing,
// flow.Fixed(500ms, 2s), one worker and 20 messages of 300 ms each, the
// leases lapse and the server redelivers. No handler call is on a copy
// the server had already given out again, the acks counted are the ones
// the server accepted, and the lapsed leases count as expired.
func TestExpiredCopiesNeverReachHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 20, nil)
		client := &failingExtensions{
			SubscriberClient: pubsubpb.NewSubscriberClient(e.srv.ClientConn()),
			modacked:         map[string]bool{},
			delivered:        map[string][]delivery{},
		}
		s, err := NewSubscriber(context.Background(), e.sub, SubscriberConfig{Client: client, Lease: flow.Fixed(500*time.Millisecond, 2*time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		var mu sync.Mutex
		calls, stale := 0, 0
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 1, func(ctx context.Context, m *Message) error {
			mu.Lock()
			calls++
			if client.redeliveredBefore(m.ID, m.AckID, time.Now()) {
				stale++
			}
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
			return nil
		})
		waitFor(t, "every message acked at the server", 10*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 20 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ss, st := e.srv.SubscriptionStats(e.sub), s.Stats()
		mu.Lock()
		defer mu.Unlock()
		if ss.Redelivered == 0 || st.Expired == 0 {
			t.Fatalf("no lease lapsed (%d redelivered, %d expired): the test did not test", ss.Redelivered, st.Expired)
		}
		if stale != 0 {
			t.Fatalf("%d of %d handler calls were on copies the server had already redelivered", stale, calls)
		}
		if int64(st.Acked) != ss.Acked {
			t.Fatalf("Stats().Acked %d, the server accepted %d (expired %d)", st.Acked, ss.Acked, st.Expired)
		}
	})
}

// TestTwoRunsShareOneBudget: two Runs at once on one subscriber with a
// budget of 50 and handlers that hold every message, the second started
// once the first's stream holds the whole budget: the server has
// exactly 50 outstanding and the subscriber says it holds exactly 50, at
// every sample, and the open streams were granted at most 50 together (a
// stream asks only for the room left, and none opens while there is none;
// the second run's wait revokes the first run's stream, which holds the
// whole budget, so both open again with their fair shares). Released,
// all 300 are acked.
func TestTwoRunsShareOneBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn(), pubsubtest.WithMaxMessagesPerResponse(10))
		e.publish(t, 300, nil)
		s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 50})
		release := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		handler := func(ctx context.Context, m *Message) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		a := runAsync(ctx, s, 4, handler)
		synctest.Wait()
		if n := e.srv.SubscriptionStats(e.sub).Outstanding; n != 50 {
			t.Fatalf("the first run alone has %d outstanding, want the whole budget of 50", n)
		}
		b := runAsync(ctx, s, 4, handler)
		for range 50 {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			srv, held := e.srv.SubscriptionStats(e.sub).Outstanding, s.Stats().Outstanding
			if srv != 50 || held != 50 {
				t.Fatalf("the server has %d outstanding and the subscriber says it holds %d, want 50 and 50 (the budget, shared by two runs)", srv, held)
			}
			var granted int64
			for _, si := range e.srv.Streams(e.sub) {
				if si.Open {
					granted += si.MaxOutstandingMessages
				}
			}
			if granted > 50 {
				t.Fatalf("the open streams were granted %d with the budget spent, want at most 50", granted)
			}
		}
		close(release)
		waitFor(t, "all acked", 5*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 300 })
		cancel()
		for _, done := range []<-chan error{a, b} {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestPanickingStageEndsPipelineCleanly: a panic in a ForEach sink, a
// Filter predicate, a go-streams sub-graph and a user's own stage ends
// the pipeline with a *stage.PanicError; nothing of the library keeps
// running, and Close returns promptly, with every message settled.
func TestPanickingStageEndsPipelineCleanly(t *testing.T) {
	cases := map[string]func(s *Subscriber) error{
		"ForEach": func(s *Subscriber) error {
			return pipeline.From(s.Source()).To(pipeline.ForEach(func(context.Context, *Message) error { panic("x") }))
		},
		"Filter": func(s *Subscriber) error {
			return pipeline.From(s.Source()).Via(pipeline.Filter(func(*Message) bool { panic("x") }, func(m *Message) { m.Nack() })).To(s.Acknowledge())
		},
		"go-streams": func(s *Subscriber) error {
			return pipeline.From(s.Source()).Via(Streams(func(*stage.Group, streams.Source) streams.Outlet { panic("x") }, StreamsOptions{})).To(s.Acknowledge())
		},
		"own stage": func(s *Subscriber) error {
			own := stage.FlowFunc[*Message, *Message](func(g *stage.Group, in <-chan *Message) <-chan *Message {
				out := make(chan *Message)
				g.Go(func(ctx context.Context) error {
					<-in
					panic("x")
				})
				return out
			})
			return pipeline.From(s.Source()).Via(own).To(s.Acknowledge())
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			e := newEnv(t)
			e.publish(t, 20, nil)
			s := e.subscriber(t, SubscriberConfig{})
			var pe *stage.PanicError
			if err := run(s); !errors.As(err, &pe) {
				t.Fatalf("pipeline = %v, want a *stage.PanicError", err)
			}
			start := time.Now()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > time.Second {
				t.Fatalf("Close took %v after the panic", took)
			}
			if st := s.Stats(); st.Outstanding != 0 || st.Leases != 0 || st.Received != st.Acked+st.Nacked+st.NoOps+st.Expired+st.AckRefused {
				t.Fatalf("after Close: %+v", st)
			}
			_ = e.srv.Close()
			goleak.VerifyNone(t, before)
		})
	}
}

// fakeServer is a misbehaving Pub/Sub server: its one StreamingPull
// response is given by the test, and it records acks and nacks.
type fakeServer struct {
	pubsubpb.UnimplementedSubscriberServer
	resp  *pubsubpb.StreamingPullResponse
	mu    sync.Mutex
	acks  []string
	nacks []string
}

func (f *fakeServer) GetSubscription(_ context.Context, in *pubsubpb.GetSubscriptionRequest) (*pubsubpb.Subscription, error) {
	return &pubsubpb.Subscription{Name: in.Subscription}, nil
}

func (f *fakeServer) StreamingPull(s pubsubpb.Subscriber_StreamingPullServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	if f.resp != nil {
		if err := s.Send(f.resp); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

func (f *fakeServer) Acknowledge(_ context.Context, in *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range in.AckIds {
		if id == "" {
			return nil, status.Error(codes.InvalidArgument, "empty ack id")
		}
	}
	f.acks = append(f.acks, in.AckIds...)
	return &emptypb.Empty{}, nil
}

func (f *fakeServer) ModifyAckDeadline(_ context.Context, in *pubsubpb.ModifyAckDeadlineRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.AckDeadlineSeconds == 0 {
		f.nacks = append(f.nacks, in.AckIds...)
	}
	return &emptypb.Empty{}, nil
}

// serveFake serves f on loopback and returns a connection to it.
func serveFake(t *testing.T, f pubsubpb.SubscriberServer) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pubsubpb.RegisterSubscriberServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
	})
	return cc
}

func received(ackID, id string) *pubsubpb.ReceivedMessage {
	return &pubsubpb.ReceivedMessage{AckId: ackID, Message: &pubsubpb.PubsubMessage{MessageId: id, Data: []byte(id)}}
}

// TestMalformedResponsesRefused: an empty ack id, the same ack id twice in
// one response and an ack id without a message never reach a handler; the
// one with a usable ack id is nacked; each kind is counted; the valid
// messages of the same response are handled and acked, and the server sees
// no empty ack id.
func TestMalformedResponsesRefused(t *testing.T) {
	f := &fakeServer{resp: &pubsubpb.StreamingPullResponse{ReceivedMessages: []*pubsubpb.ReceivedMessage{
		received("a", "1"),
		received("", "2"),
		received("a", "3"),
		{AckId: "b"},
		received("c", "4"),
	}}}
	s, err := NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{Conn: serveFake(t, f)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var handled []string
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, s, 2, func(_ context.Context, m *Message) error {
		mu.Lock()
		handled = append(handled, m.ID)
		mu.Unlock()
		return nil
	})
	waitFor(t, "the valid messages acked", 30*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.acks) == 2 && len(f.nacks) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 2 || handled[0]+handled[1] != "14" && handled[0]+handled[1] != "41" {
		t.Fatalf("handled %v, want messages 1 and 4 only", handled)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nacks[0] != "b" {
		t.Fatalf("nacked %v, want b (the ack id without a message)", f.nacks)
	}
	st := s.Stats()
	if st.EmptyAckIDs != 1 || st.DuplicateAckIDs != 1 || st.MissingMessages != 1 || st.Received != 2 || st.Acked != 2 {
		t.Fatalf("stats %+v, want one of each kind refused and 2 received and acked", st)
	}
}

// TestShutdownFromHandler: a handler that shuts the subscriber down with
// its own ctx does not wait for itself: Run returns within the drain of
// the others, and the handler's message is acked, not nacked.
func TestShutdownFromHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 1, nil)
		s := e.subscriber(t, SubscriberConfig{})
		start := time.Now()
		err := s.Run(context.Background(), 1, func(ctx context.Context, m *Message) error {
			if err := s.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown from the handler = %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("Run took %v after a handler shut the subscriber down", took)
		}
		if st := s.Stats(); st.Acked != 1 || st.Nacked != 0 {
			t.Fatalf("stats %+v, want the handler's message acked", st)
		}
	})
}

// TestReconnectTimeoutHonouredAgainstSilentEndpoint: an endpoint that
// accepts connections and never answers ends Run with an
// *source.UnreachableError within a second of ReconnectTimeout, not after
// gRPC's 20 s connect timeout.
func TestReconnectTimeoutHonouredAgainstSilentEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lis := bufconn.Listen(1 << 16)
		defer lis.Close()
		go func() { // accept, then say nothing
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		cc, err := grpc.NewClient("passthrough:///silent",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		s, err := NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{Conn: cc, Ordering: true, ReconnectTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = s.Run(context.Background(), 1, func(context.Context, *Message) error { return nil })
		var ue *source.UnreachableError
		if !errors.As(err, &ue) {
			t.Fatalf("Run = %v, want an *source.UnreachableError", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("Run ended after %v with ReconnectTimeout 2s", took)
		}
	})
}

// eofServer closes every stream at once with OK.
type eofServer struct{ fakeServer }

func (*eofServer) StreamingPull(pubsubpb.Subscriber_StreamingPullServer) error { return nil }

// TestStreamsClosedWithoutStatusEndUnreachable: a server that closes
// every stream with OK (io.EOF at the client) ends Run, after
// ReconnectTimeout, with an *source.UnreachableError whose last error says so.
func TestStreamsClosedWithoutStatusEndUnreachable(t *testing.T) {
	s, err := NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{Conn: serveFake(t, &eofServer{}), ReconnectTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background(), 1, func(context.Context, *Message) error { return nil })
	var ue *source.UnreachableError
	if !errors.As(err, &ue) || status.Code(err) != codes.Unavailable || errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v, want an *source.UnreachableError with UNAVAILABLE", err)
	}
}

// TestMaxExtensionBelowDeadlineRefused: a MaxExtension shorter than the
// stream ack deadline would drop every lease before its first extension.
func TestMaxExtensionBelowDeadlineRefused(t *testing.T) {
	for _, cfg := range []SubscriberConfig{
		{MaxExtension: time.Nanosecond},
		{MaxExtension: 30 * time.Second},
		{StreamAckDeadline: 20 * time.Second, MaxExtension: 15 * time.Second},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted it", cfg)
		}
	}
	if err := (&SubscriberConfig{StreamAckDeadline: 10 * time.Second, MaxExtension: 10 * time.Second}).Validate(); err != nil {
		t.Errorf("MaxExtension equal to the stream ack deadline refused: %v", err)
	}
}

// TestHTTPEndpointIsNotPubSub: an endpoint that answers HTTP 404 (a proxy,
// a wrong port) makes NewSubscriber fail with an error naming the endpoint,
// rather than pass as "ordering detection unsupported".
func TestHTTPEndpointIsNotPubSub(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true) // gRPC's cleartext HTTP/2, with prior knowledge
	srv := &http.Server{Handler: http.NotFoundHandler(), Protocols: &protocols}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	_, err = NewSubscriber(context.Background(), "projects/p/subscriptions/sub", SubscriberConfig{Connect: ConnectOptions{Endpoint: lis.Addr().String(), Insecure: true}})
	if err == nil || !strings.Contains(err.Error(), lis.Addr().String()) || !strings.Contains(err.Error(), "HTTP") {
		t.Fatalf("NewSubscriber = %v, want an error naming %s and HTTP", err, lis.Addr())
	}
}

// TestNoOpCountsUntilDeadline: messages released with NoOp stay the
// server's until their deadline, so a stream reopened meanwhile is not
// granted their room: the server never hands out more than the budget.
func TestNoOpCountsUntilDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 100, nil)
		s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 10, StreamAckDeadline: 20 * time.Second})
		seen := map[string]bool{}
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 4, func(_ context.Context, m *Message) error {
			n, _ := strconv.Atoi(string(m.Data))
			mu.Lock()
			first := !seen[m.ID]
			seen[m.ID] = true
			mu.Unlock()
			if first && n < 10 {
				m.NoOp() // released here, the server's until its deadline
			}
			return nil
		})
		for range 100 { // 10 s: the NoOp'd messages are still the server's
			time.Sleep(100 * time.Millisecond)
			e.srv.KillStreams(codes.Unavailable, "test: reconnect")
			synctest.Wait()
			if out := e.srv.SubscriptionStats(e.sub).Outstanding; out > 10 {
				t.Fatalf("the server has %d outstanding for a budget of 10 after NoOps and reconnects", out)
			}
		}
		waitFor(t, "all acked", 10*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 100 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.NoOps == 0 {
			t.Fatalf("no NoOp happened: %+v", st)
		}
	})
}

// TestSourcePipelinesRaceClose: Source pipelines started while Close runs,
// 1,000 times: no panic, nothing left running, every pipeline ends either
// having run (it joined before Close began) or with ErrClosed, and none
// joins after Close began.
func TestSourcePipelinesRaceClose(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 50, nil)
	for i := range 1000 {
		s, err := NewSubscriber(context.Background(), e.sub, SubscriberConfig{Conn: e.srv.ClientConn(), Ordering: true, DrainTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for range 3 {
			wg.Go(func() { errs <- pipeline.From(s.Source()).To(s.Acknowledge()) })
		}
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: Close = %v", i, err)
		}
		// Once Close has returned, the lifecycle has no run and takes none.
		s.life.mu.Lock()
		runs, state := s.life.runs, s.life.state
		s.life.mu.Unlock()
		if runs != 0 || state != closed {
			t.Fatalf("round %d: after Close %d runs, state %v", i, runs, state)
		}
		if err := pipeline.From(s.Source()).To(s.Acknowledge()); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: a pipeline after Close = %v, want ErrClosed", i, err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: pipeline = %v", i, err)
			}
		}
	}
}
