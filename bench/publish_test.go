package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// The batching every publisher of BenchmarkPublish shares: the Publisher's
// and Google's defaults.
const (
	pubBatchMessages = 100                   // messages per Publish request
	pubBatchBytes    = 1_000_000             // encoded message bytes per request
	pubDelay         = 10 * time.Millisecond // oldest message's wait before its batch is sent
	pubInFlight      = 16                    // Publish RPCs in flight at once
	pubKeys          = 100                   // ordering keys of the ordered runs
)

// pubLoad is one publishing run: n messages of payload bytes, keyed
// round-robin over keys ordering keys (0: unordered).
type pubLoad struct {
	n, payload, keys int
}

// pubTarget is the server a publisher publishes to: in this process
// (pubEnv) or in a child process (pubChild).
type pubTarget interface {
	dial(tb testing.TB) *grpc.ClientConn
	topicName() string
	project() string
	publishCalls(tb testing.TB) int64 // Publish RPCs the server has served
}

// pubClient publishes load to the topic of e and returns once every
// message's publish has settled (the first error, if any).
type pubClient struct {
	name string
	run  func(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad) error
}

var pubClients = []pubClient{
	{"ours", func(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad) error {
		return publishOurs(ctx, tb, e, l, nil)
	}},
	{"raw", publishRaw},
	{"google", func(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad) error {
		return publishGoogle(ctx, tb, e, l, false)
	}},
}

// BenchmarkPublish publishes b.N messages (so ns/op and allocs/op are per
// message) of 64 B or 1 KiB to a pubsubtest server in this process over
// loopback TCP, unordered or over 100 ordering keys, with:
//
//   - ours: publisher.Publisher, batching as configured by default (100
//     messages, 1 MB, 10 ms, 16 RPCs in flight) and its default flow
//     control; every Result is waited for (in a window of pubWindow),
//     the last batch sent by Flush at the end, as raw sends its last.
//   - raw: the physical reference: the publishing goroutine makes each
//     wire message and sizes it (its data field) for the same byte bound,
//     cuts requests of 100 messages (or 1 MB), and 16 goroutines send
//     them with the generated client; no flow control, no ordering, no
//     per-message result. Unordered only.
//   - google: Google's Publisher (cloud.google.com/go/pubsub/v2) with the
//     same thresholds and NumGoroutines 16; every PublishResult is waited
//     for, the last bundle sent by Flush.
//
// The server runs in this process, so cpu-ns/msg (user + system time of
// the process per message) includes its share, and its garbage collection
// is paced by the whole process's heap: a client that holds more (the
// raw loop's 1 MiB gRPC request buffers, ~12 MB at 1 KiB) makes it run
// less often for the server's allocations too. BenchmarkPublishClient
// measures each client in a process of its own.
//
//	go test -run '^$' -bench 'Publish$' -benchtime 200000x -count 1 ./bench/
func BenchmarkPublish(b *testing.B) {
	for _, payload := range []int{64, 1024} {
		for _, keys := range []int{0, pubKeys} {
			for _, c := range pubClients {
				if keys > 0 && c.name == "raw" {
					continue // the raw loop does not order
				}
				ordering := "off"
				if keys > 0 {
					ordering = fmt.Sprintf("keys%d", keys)
				}
				b.Run(fmt.Sprintf("payload=%dB/ordering=%s/client=%s", payload, ordering, c.name), func(b *testing.B) {
					benchPublish(b, newPubEnv(b), c, payload, keys)
				})
			}
		}
	}
}

// BenchmarkPublishClient is BenchmarkPublish (unordered) with the server
// in a child process (this test binary, re-run), so that cpu-ns/msg,
// allocs/op and B/op are the publisher's alone: what each publisher costs
// on top of the gRPC client it shares with the others.
//
//	go test -run '^$' -bench 'PublishClient' -benchtime 200000x -count 1 ./bench/
func BenchmarkPublishClient(b *testing.B) {
	for _, payload := range []int{64, 1024} {
		for _, c := range pubClients {
			b.Run(fmt.Sprintf("payload=%dB/client=%s", payload, c.name), func(b *testing.B) {
				benchPublish(b, startPubChild(b), c, payload, 0)
			})
		}
	}
}

// BenchmarkPublishTraced is BenchmarkPublish (unordered) with tracing:
// "off" (no tracer), "unsampled" (sdktrace.NeverSample) and "sampled"
// (every span recorded and batched to an exporter that drops them). Ours
// gets the provider in Config.TracerProvider; Google's publisher, which
// reads the global provider, gets it through otel.SetTracerProvider and
// ClientConfig.EnableOpenTelemetryTracing.
//
// server=inproc runs the server in this process, as BenchmarkPublish
// does; server=child in a child process (this test binary, re-run), so
// that CPU and allocations per message are the client's alone: a traced
// message carries its trace context as an attribute, which the server
// then decodes (a map entry: about 15 allocations in Go's protobuf), a
// cost of the wire format and not of the client.
//
//	go test -run '^$' -bench 'PublishTraced' -benchtime 100000x -count 1 ./bench/
func BenchmarkPublishTraced(b *testing.B) {
	for _, server := range []string{"inproc", "child"} {
		for _, payload := range []int{64, 1024} {
			for _, mode := range []string{"off", "unsampled", "sampled"} {
				for _, name := range []string{"ours", "google"} {
					b.Run(fmt.Sprintf("server=%s/payload=%dB/tracing=%s/client=%s", server, payload, mode, name), func(b *testing.B) {
						c, done := tracedPubClient(name, mode)
						defer done()
						var e pubTarget
						if server == "child" {
							e = startPubChild(b)
						} else {
							e = newPubEnv(b)
						}
						benchPublish(b, e, c, payload, 0)
					})
				}
			}
		}
	}
}

// tracedPubClient returns the publisher name with tracing mode ("off",
// "unsampled", "sampled") and a function that ends its tracer provider.
func tracedPubClient(name, mode string) (pubClient, func()) {
	var tp trace.TracerProvider
	done := func() {}
	if mode != "off" {
		sampler := sdktrace.AlwaysSample()
		if mode == "unsampled" {
			sampler = sdktrace.NeverSample()
		}
		stp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(dropSpans{}))
		tp = stp
		done = func() { _ = stp.Shutdown(context.Background()) }
	}
	c := pubClient{name: name}
	if name == "ours" {
		c.run = func(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad) error {
			return publishOurs(ctx, tb, e, l, tp)
		}
		return c, done
	}
	if tp != nil {
		otel.SetTracerProvider(tp)
		end := done
		done = func() {
			otel.SetTracerProvider(noop.NewTracerProvider())
			end()
		}
	}
	c.run = func(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad) error {
		return publishGoogle(ctx, tb, e, l, tp != nil)
	}
	return c, done
}

// pubServer is a pubsubtest server with topic "topic" and no
// subscription: it assigns ids and keeps nothing, so its heap does not
// grow with the run.
type pubServer struct {
	*pubsubtest.Server
	topic string
}

func newPubServer() (*pubServer, error) {
	srv, err := pubsubtest.NewServer(pubsubtest.WithMessageStatsLimit(1000))
	if err != nil {
		return nil, err
	}
	topic, err := srv.CreateTopic(context.Background(), "topic")
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	return &pubServer{Server: srv, topic: topic}, nil
}

// pubEnv is a pubTarget in this process.
type pubEnv struct{ srv *pubServer }

func newPubEnv(tb testing.TB) *pubEnv {
	tb.Helper()
	srv, err := newPubServer()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	return &pubEnv{srv: srv}
}

func (e *pubEnv) dial(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	cc, err := e.srv.Dial(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return cc
}

func (e *pubEnv) topicName() string             { return e.srv.topic }
func (e *pubEnv) project() string               { return e.srv.Project() }
func (e *pubEnv) publishCalls(testing.TB) int64 { return e.srv.MethodStats("Publish").Calls }

// pubServerEnv, when set, makes the test binary serve a topic for
// BenchmarkPublishTraced's server=child (see servePublish).
const pubServerEnv = "PUBSUBFLOW_BENCH_PUBSERVER"

// servePublish is the child process of server=child: a pubServer. It
// prints "ADDR <address> <topic> <project>" once ready, answers "CALLS"
// with "CALLS <Publish RPCs served>", and exits when its input closes.
func servePublish() int {
	srv, err := newPubServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench publish server:", err)
		return 1
	}
	defer srv.Close()
	fmt.Printf("ADDR %s %s %s\n", srv.Addr(), srv.topic, srv.Project())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "CALLS" {
			fmt.Printf("CALLS %d\n", srv.MethodStats("Publish").Calls)
		}
	}
	return 0
}

// pubChild is a pubTarget in a child process.
type pubChild struct{ *childServer }

func startPubChild(tb testing.TB) pubChild {
	return pubChild{startChild(tb, pubServerEnv+"=1")}
}

func (c pubChild) topicName() string { return c.sub }

func (c pubChild) publishCalls(tb testing.TB) int64 {
	c.send(tb, "CALLS")
	for c.out.Scan() {
		var n int64
		if _, err := fmt.Sscanf(c.out.Text(), "CALLS %d", &n); err == nil {
			return n
		}
	}
	tb.Fatalf("bench publish server: no CALLS: %v", c.out.Err())
	return 0
}

func benchPublish(b *testing.B, e pubTarget, c pubClient, payload, keys int) {
	ctx := context.Background()
	// Warm up outside the clock: connections, pools, the server's maps.
	if err := c.run(ctx, b, e, pubLoad{n: 2 * pubBatchMessages * pubInFlight, payload: payload, keys: keys}); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	calls := e.publishCalls(b)
	b.ReportAllocs()
	b.ResetTimer()
	m := StartMeter(0)
	err := c.run(ctx, b, e, pubLoad{n: b.N, payload: payload, keys: keys})
	r := m.Stop()
	b.StopTimer()
	if err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	n := float64(b.N)
	b.ReportMetric(n/r.Elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(r.CPU.Nanoseconds())/n, "cpu-ns/msg")
	b.ReportMetric(n/float64(e.publishCalls(b)-calls), "msgs/rpc")
}

// pubData returns a payload of n bytes.
func pubData(n int) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	return data
}

// pubKeyNames returns n ordering keys (nil for 0).
func pubKeyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%03d", i)
	}
	return keys
}

// publishOurs publishes l with a publisher.Publisher of default batching
// (tp: its tracer provider, nil for none) and waits for every Result.
func publishOurs(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad, tp trace.TracerProvider) error {
	cc := e.dial(tb)
	defer cc.Close()
	p, err := publisher.New(cc, e.topicName(), publisher.Config{
		MaxMessages:        pubBatchMessages,
		MaxBytes:           pubBatchBytes,
		Delay:              pubDelay,
		MaxInFlightBatches: pubInFlight,
		EnableOrdering:     l.keys > 0,
		TracerProvider:     tp,
	})
	if err != nil {
		return err
	}
	defer p.Close()
	data, keys := pubData(l.payload), pubKeyNames(l.keys)
	w := newWindow[*publisher.Result](l.n)
	for i := range l.n {
		m := &publisher.Message{Data: data}
		if len(keys) > 0 {
			m.OrderingKey = keys[i%len(keys)]
		}
		if err := w.add(ctx, p.Publish(ctx, m)); err != nil {
			return err
		}
	}
	// The last batch goes out now, as the raw loop sends its last request:
	// else, once a batch before it was cut short by Delay, the last one
	// waits out Delay (10 ms: 2.5% of a run of 200,000 at 500k/s).
	if err := p.Flush(ctx); err != nil {
		return err
	}
	return w.drain(ctx)
}

// pubWindow is how many results a publishing run holds before it waits
// for the oldest: our Publisher's default flow-control limit, well above
// the 16 × 100 messages in flight, so waiting for results does not slow
// the publishers, and the results held do not grow with the run.
const pubWindow = 10_000

// resultOf is a publish result: ours or Google's.
type resultOf interface {
	Get(ctx context.Context) (string, error)
}

// window holds the last pubWindow results, in publish order.
type window[R resultOf] struct {
	rs   []R
	next int // index of the oldest once rs is full
}

func newWindow[R resultOf](n int) *window[R] {
	return &window[R]{rs: make([]R, 0, min(n, pubWindow))}
}

// add holds r, first waiting for the oldest result when the window is full.
func (w *window[R]) add(ctx context.Context, r R) error {
	if len(w.rs) < cap(w.rs) {
		w.rs = append(w.rs, r)
		return nil
	}
	if _, err := w.rs[w.next].Get(ctx); err != nil {
		return err
	}
	w.rs[w.next] = r
	w.next = (w.next + 1) % len(w.rs)
	return nil
}

// drain waits for every result held.
func (w *window[R]) drain(ctx context.Context) error {
	for _, r := range w.rs {
		if _, err := r.Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

// publishGoogle publishes l with Google's Publisher, batching as ours
// does, and waits for every PublishResult.
func publishGoogle(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad, tracing bool) error {
	c, err := pubsub.NewClientWithConfig(context.Background(), e.project(),
		&pubsub.ClientConfig{EnableOpenTelemetryTracing: tracing}, option.WithGRPCConn(e.dial(tb)))
	if err != nil {
		return err
	}
	defer c.Close()
	p := c.Publisher(e.topicName())
	defer p.Stop()
	p.PublishSettings.CountThreshold = pubBatchMessages
	p.PublishSettings.ByteThreshold = pubBatchBytes
	p.PublishSettings.DelayThreshold = pubDelay
	p.PublishSettings.NumGoroutines = pubInFlight
	p.EnableMessageOrdering = l.keys > 0
	data, keys := pubData(l.payload), pubKeyNames(l.keys)
	w := newWindow[*pubsub.PublishResult](l.n)
	for i := range l.n {
		m := &pubsub.Message{Data: data}
		if len(keys) > 0 {
			m.OrderingKey = keys[i%len(keys)]
		}
		if err := w.add(ctx, p.Publish(ctx, m)); err != nil {
			return err
		}
	}
	p.Flush() // the last bundle goes out now, as in publishOurs
	return w.drain(ctx)
}

// publishRaw is the physical reference for a batching publisher: requests
// cut at the same message and byte bounds, sent by pubInFlight goroutines
// with the generated client. No flow control, no ordering, no Result per
// message: a request's ids are counted and dropped.
func publishRaw(ctx context.Context, tb testing.TB, e pubTarget, l pubLoad) error {
	cc := e.dial(tb)
	defer cc.Close()
	client := pubsubpb.NewPublisherClient(cc)
	reqs := make(chan []*pubsubpb.PubsubMessage)
	var wg sync.WaitGroup
	errs := make([]error, pubInFlight)
	for i := range pubInFlight {
		wg.Go(func() {
			for msgs := range reqs {
				if errs[i] != nil {
					continue
				}
				resp, err := client.Publish(ctx, &pubsubpb.PublishRequest{Topic: e.topicName(), Messages: msgs})
				if err == nil && len(resp.MessageIds) != len(msgs) {
					err = fmt.Errorf("raw publish: %d ids for %d messages", len(resp.MessageIds), len(msgs))
				}
				errs[i] = err
			}
		})
	}
	data := pubData(l.payload)
	msgs := make([]*pubsubpb.PubsubMessage, 0, pubBatchMessages)
	bytes := 0
	for range l.n {
		m := &pubsubpb.PubsubMessage{Data: data}
		size := 1 + protowire.SizeBytes(len(m.Data)) // proto.Size(m), without the descriptor walk
		if len(msgs) > 0 && bytes+size > pubBatchBytes {
			reqs <- msgs
			msgs, bytes = make([]*pubsubpb.PubsubMessage, 0, pubBatchMessages), 0
		}
		msgs = append(msgs, m)
		bytes += size
		if len(msgs) == pubBatchMessages {
			reqs <- msgs
			msgs, bytes = make([]*pubsubpb.PubsubMessage, 0, pubBatchMessages), 0
		}
	}
	if len(msgs) > 0 {
		reqs <- msgs
	}
	close(reqs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
