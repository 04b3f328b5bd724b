package publisher

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/limits"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// A plain publish over gRPC: every message gets a distinct id and reaches
// the subscription with its data, attributes and ordering key.
func TestPublishBasic(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(t, Config{EnableOrdering: true})
	const n = 250
	results := make([]*Result, n)
	for i := range n {
		m := msg(i)
		m.Attributes = map[string]string{"i": string(m.Data)}
		if i%2 == 0 {
			m.OrderingKey = "k"
		}
		results[i] = p.Publish(context.Background(), m)
	}
	ids := map[string]bool{}
	for _, r := range results {
		ids[mustGet(t, r)] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct ids for %d messages", len(ids), n)
	}
	if got := e.srv.SubscriptionStats(e.sub).Published; got != n {
		t.Fatalf("subscription got %d messages, want %d", got, n)
	}
	resp, err := pubsubpb.NewSubscriberClient(e.srv.ClientConn()).Pull(context.Background(), &pubsubpb.PullRequest{Subscription: e.sub, MaxMessages: n})
	if err != nil || len(resp.ReceivedMessages) != n {
		t.Fatalf("pull: %v, %d messages", err, len(resp.GetReceivedMessages()))
	}
	id0 := mustGet(t, results[0])
	for _, rm := range resp.ReceivedMessages {
		if m := rm.Message; m.MessageId == id0 && (string(m.Data) != "m0" || m.Attributes["i"] != "m0" || m.OrderingKey != "k") {
			t.Fatalf("first message arrived as %v", m)
		}
	}
	st := p.Stats()
	if st.Published != n || st.OutstandingMessages != 0 || st.OutstandingBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// MaxMessages closes batches: 95 messages in batches of 10 are 9 RPCs at
// once and a 10th on Flush, whatever the delay.
func TestBatchClosesOnCount(t *testing.T) {
	e := newEnv(t)
	rec := newRecorder(pubsubpb.NewPublisherClient(e.srv.ClientConn()))
	p := e.publisher(t, Config{MaxMessages: 10, Delay: maxDelay}, rec)
	var results []*Result
	for i := range 95 {
		results = append(results, p.Publish(context.Background(), msg(i)))
	}
	waitFor(t, "9 Publish calls", func() bool { return e.calls() == 9 })
	if settled(results[94]) {
		t.Fatal("the message of the open batch settled before Flush")
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.calls(); got != 10 {
		t.Fatalf("%d Publish calls, want 10", got)
	}
	for i, req := range rec.requests() {
		if want := 10; i < 9 && len(req.Messages) != want {
			t.Fatalf("request %d has %d messages, want %d", i, len(req.Messages), want)
		}
	}
	for _, r := range results {
		mustGet(t, r)
	}
}

// MaxBytes closes batches, and a message never takes a batch over it:
// 104-byte messages (in the request) under a 1000-byte limit go 9 a batch.
func TestBatchClosesOnBytes(t *testing.T) {
	e := newEnv(t)
	rec := newRecorder(pubsubpb.NewPublisherClient(e.srv.ClientConn()))
	p := e.publisher(t, Config{MaxBytes: 1000, MaxMessages: 1000, Delay: maxDelay}, rec)
	data := bytes.Repeat([]byte("x"), 100)
	var results []*Result
	for range 91 { // the 91st closes the 10th batch, which it does not fit
		results = append(results, p.Publish(context.Background(), &Message{Data: data}))
	}
	for _, r := range results[:90] {
		mustGet(t, r)
	}
	if got := e.calls(); got != 10 {
		t.Fatalf("%d Publish calls, want 10", got)
	}
	topicBytes := fieldBytes(len(e.topic))
	for i, req := range rec.requests() {
		if len(req.Messages) != 9 {
			t.Fatalf("request %d has %d messages, want 9", i, len(req.Messages))
		}
		if n := proto.Size(req); n > 1000+topicBytes {
			t.Fatalf("request %d is %d bytes, over MaxBytes", i, n)
		}
	}
}

// Delay closes a batch: nothing is sent before the delay has passed since
// the batch's first message, and one RPC right after (virtual time).
func TestBatchClosesOnDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		p := e.publisher(t, Config{Delay: 50 * time.Millisecond})
		r1 := p.Publish(context.Background(), msg(1))
		time.Sleep(30 * time.Millisecond)
		r2 := p.Publish(context.Background(), msg(2))
		time.Sleep(19 * time.Millisecond)
		synctest.Wait()
		if e.calls() != 0 || settled(r1) {
			t.Fatalf("sent before the delay: %d calls", e.calls())
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if !settled(r1) || !settled(r2) || e.calls() != 1 {
			t.Fatalf("after the delay: settled %v %v, %d calls", settled(r1), settled(r2), e.calls())
		}
		// The next message opens a new batch with its own delay.
		r3 := p.Publish(context.Background(), msg(3))
		time.Sleep(49 * time.Millisecond)
		synctest.Wait()
		if settled(r3) {
			t.Fatal("second batch sent early")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if !settled(r3) || e.calls() != 2 {
			t.Fatalf("second batch: settled %v, %d calls", settled(r3), e.calls())
		}
	})
}

// Whatever the thresholds, a request never exceeds the API's 1000 messages
// or 10 MB, and a message too large for any request fails at once.
func TestBatchesStayWithinAPILimits(t *testing.T) {
	e := newEnv(t)
	rec := newRecorder(pubsubpb.NewPublisherClient(e.srv.ClientConn()))
	p := e.publisher(t, Config{MaxMessages: limits.MaxRequestMessages, MaxBytes: limits.MaxRequestBytes, Delay: maxDelay}, rec)
	var results []*Result
	for i := range 2500 {
		results = append(results, p.Publish(context.Background(), msg(i)))
	}
	big := bytes.Repeat([]byte("b"), 3_000_000)
	for range 7 {
		results = append(results, p.Publish(context.Background(), &Message{Data: big}))
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		mustGet(t, r)
	}
	for i, req := range rec.requests() {
		if len(req.Messages) > limits.MaxRequestMessages || proto.Size(req) > limits.MaxRequestBytes {
			t.Fatalf("request %d: %d messages, %d bytes", i, len(req.Messages), proto.Size(req))
		}
	}
	// 2500 small ones: 1000 + 1000 + 500 with 3 big (9 MB) + 3 big + 1 big.
	if got := len(rec.requests()); got != 5 {
		t.Fatalf("%d requests, want 5", got)
	}
	r := p.Publish(context.Background(), &Message{Data: make([]byte, limits.MaxRequestBytes)})
	if _, err := r.Get(context.Background()); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("oversized message: %v, want ErrInvalidMessage", err)
	}
}

// Batches closed on count behind a batch that stays open (a quiet ordering
// key under a long Delay) do not pile up in the timer list.
func TestTimerListStaysBounded(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(t, Config{EnableOrdering: true, MaxMessages: 2, Delay: maxDelay})
	quiet := p.Publish(context.Background(), &Message{Data: []byte("q"), OrderingKey: "quiet"})
	var results []*Result
	for i := range 6000 {
		results = append(results, p.Publish(context.Background(), msg(i)))
	}
	p.mu.Lock()
	n, open := p.timers.Len(), p.openCount
	p.mu.Unlock()
	if open != 1 || n > 2*open+1025 {
		t.Fatalf("timer list holds %d batches for %d open", n, open)
	}
	for _, r := range results {
		mustGet(t, r)
	}
	if settled(quiet) {
		t.Fatal("the quiet batch was sent before its delay")
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustGet(t, quiet)
}
