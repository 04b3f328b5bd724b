package bench

import (
	"context"
	"fmt"
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

// pubClient publishes load to the topic of e and returns once every
// message's publish has settled (the first error, if any).
type pubClient struct {
	name string
	run  func(ctx context.Context, tb testing.TB, e *env, l pubLoad) error
}

var pubClients = []pubClient{
	{"ours", func(ctx context.Context, tb testing.TB, e *env, l pubLoad) error {
		return publishOurs(ctx, tb, e, l, nil)
	}},
	{"raw", publishRaw},
	{"google", func(ctx context.Context, tb testing.TB, e *env, l pubLoad) error {
		return publishGoogle(ctx, tb, e, l, false)
	}},
}

// BenchmarkPublish publishes b.N messages (so ns/op and allocs/op are per
// message) of 64 B or 1 KiB to a pubsubtest server in this process over
// loopback TCP, unordered or over 100 ordering keys, with:
//
//   - ours: publisher.Publisher, batching as configured by default (100
//     messages, 1 MB, 10 ms, 16 RPCs in flight) and its default flow
//     control; every Result is waited for.
//   - raw: the physical reference: the publishing goroutine encodes
//     nothing but sizes each message (its data field) for the same byte
//     bound, cuts
//     requests of 100 messages (or 1 MB), and 16 goroutines send them with
//     the generated client; no flow control, no ordering, no per-message
//     result. Unordered only.
//   - google: Google's Publisher (cloud.google.com/go/pubsub/v2) with the
//     same thresholds and NumGoroutines 16; every PublishResult is waited
//     for.
//
// The server runs in this process, so cpu-ns/msg (user + system time of
// the process per message) includes its share, the same for every client.
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
					benchPublish(b, c, payload, keys)
				})
			}
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
//	go test -run '^$' -bench 'PublishTraced' -benchtime 100000x -count 1 ./bench/
func BenchmarkPublishTraced(b *testing.B) {
	for _, payload := range []int{64, 1024} {
		for _, mode := range []string{"off", "unsampled", "sampled"} {
			for _, name := range []string{"ours", "google"} {
				b.Run(fmt.Sprintf("payload=%dB/tracing=%s/client=%s", payload, mode, name), func(b *testing.B) {
					var tp trace.TracerProvider
					if mode != "off" {
						sampler := sdktrace.AlwaysSample()
						if mode == "unsampled" {
							sampler = sdktrace.NeverSample()
						}
						stp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(dropSpans{}))
						defer stp.Shutdown(context.Background())
						tp = stp
					}
					c := pubClient{name: name}
					if name == "ours" {
						c.run = func(ctx context.Context, tb testing.TB, e *env, l pubLoad) error {
							return publishOurs(ctx, tb, e, l, tp)
						}
					} else {
						if tp != nil {
							otel.SetTracerProvider(tp)
							defer otel.SetTracerProvider(noop.NewTracerProvider())
						}
						c.run = func(ctx context.Context, tb testing.TB, e *env, l pubLoad) error {
							return publishGoogle(ctx, tb, e, l, tp != nil)
						}
					}
					benchPublish(b, c, payload, 0)
				})
			}
		}
	}
}

// newPubEnv starts a pubsubtest server with topic "topic" and no
// subscription: the server assigns ids and keeps nothing, so its heap does
// not grow with the run.
func newPubEnv(tb testing.TB) *env {
	tb.Helper()
	srv, err := pubsubtest.NewServer(pubsubtest.WithMessageStatsLimit(1000))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	topic, err := srv.CreateTopic(context.Background(), "topic")
	if err != nil {
		tb.Fatal(err)
	}
	return &env{srv: srv, topic: topic}
}

func benchPublish(b *testing.B, c pubClient, payload, keys int) {
	e := newPubEnv(b)
	ctx := context.Background()
	// Warm up outside the clock: connections, pools, the server's maps.
	if err := c.run(ctx, b, e, pubLoad{n: 2 * pubBatchMessages * pubInFlight, payload: payload, keys: keys}); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
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
func publishOurs(ctx context.Context, tb testing.TB, e *env, l pubLoad, tp trace.TracerProvider) error {
	cc := e.dial(tb)
	defer cc.Close()
	p, err := publisher.New(cc, e.topic, publisher.Config{
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
func publishGoogle(ctx context.Context, tb testing.TB, e *env, l pubLoad, tracing bool) error {
	c, err := pubsub.NewClientWithConfig(context.Background(), e.srv.Project(),
		&pubsub.ClientConfig{EnableOpenTelemetryTracing: tracing}, option.WithGRPCConn(e.dial(tb)))
	if err != nil {
		return err
	}
	defer c.Close()
	p := c.Publisher(e.topic)
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
	return w.drain(ctx)
}

// publishRaw is the physical reference for a batching publisher: requests
// cut at the same message and byte bounds, sent by pubInFlight goroutines
// with the generated client. No flow control, no ordering, no Result per
// message: a request's ids are counted and dropped.
func publishRaw(ctx context.Context, tb testing.TB, e *env, l pubLoad) error {
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
				resp, err := client.Publish(ctx, &pubsubpb.PublishRequest{Topic: e.topic, Messages: msgs})
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
