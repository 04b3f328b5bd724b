package publisher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func manyAttrs(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

// TestPublishRefusesWhatTheServiceRefuses: every message the service
// would refuse fails at once, before it is queued (no Publish RPC, so no
// retry), with an error that names the limit, the field and the message's
// index; a valid message published right after it, into the same batch,
// is published. Each case runs under a deadline.
func TestPublishRefusesWhatTheServiceRefuses(t *testing.T) {
	bad := string([]byte{0xff, 0xfe, 0xfd})
	cases := []struct {
		name  string
		m     *Message
		limit string // "" = valid
	}{
		{"data only", &Message{Data: []byte("x")}, ""},
		{"attributes only", &Message{Attributes: map[string]string{"a": "b"}}, ""},
		{"empty message", &Message{}, "empty message"},
		{"data over 10 MB", &Message{Data: make([]byte, 10_000_001)}, "message size"},
		{"100 attributes", &Message{Attributes: manyAttrs(100)}, ""},
		{"101 attributes", &Message{Attributes: manyAttrs(101)}, "attributes per message"},
		{"300-byte key", &Message{Attributes: map[string]string{strings.Repeat("k", 300): "v"}}, "attribute key size"},
		{"2000-byte value", &Message{Attributes: map[string]string{"k": strings.Repeat("v", 2000)}}, "attribute value size"},
		{"goog key", &Message{Attributes: map[string]string{"goog-x": "v"}}, "reserved attribute key"},
		{"empty key", &Message{Data: []byte("x"), Attributes: map[string]string{"": "v"}}, "attribute key"},
		{"invalid UTF-8 key", &Message{Attributes: map[string]string{bad: "v"}}, "UTF-8"},
		{"invalid UTF-8 value", &Message{Attributes: map[string]string{"k": bad}}, "UTF-8"},
		{"2000-byte ordering key", &Message{Data: []byte("x"), OrderingKey: strings.Repeat("o", 2000)}, "ordering key size"},
		{"invalid UTF-8 ordering key", &Message{Data: []byte("x"), OrderingKey: bad}, "UTF-8"},
		{"1024-byte ordering key", &Message{Data: []byte("x"), OrderingKey: strings.Repeat("o", 1024)}, ""},
		{"data plus attributes over the request", &Message{Data: make([]byte, 10_000_000), Attributes: map[string]string{"k": "v"}}, "request size"},
	}
	e := newEnv(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p := e.publisher(t, Config{EnableOrdering: true, Delay: maxDelay})
			before := e.calls()
			r := p.Publish(ctx, c.m)
			key := c.m.OrderingKey
			if c.limit != "" {
				key = "" // the companion needs a valid key; unordered, it goes to the batch the bad message would have joined
			}
			good := p.Publish(ctx, &Message{Data: []byte("good"), OrderingKey: key})
			if c.limit != "" {
				if !settled(r) {
					t.Fatal("a refused message must fail at once, before it is queued")
				}
				_, err := r.Get(ctx)
				var ie *Error
				if !errors.As(err, &ie) || ie.Kind != ErrInvalidMessage || !strings.Contains(ie.Detail, c.limit) {
					t.Fatalf("%v, want an invalid message Error for %q", err, c.limit)
				}
				if !errors.Is(err, ErrInvalidMessage) || status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%v: want errors.Is ErrInvalidMessage and code InvalidArgument, got %v", err, status.Code(err))
				}
				if !strings.Contains(err.Error(), "message #0") || !strings.Contains(err.Error(), c.limit) {
					t.Fatalf("error %q must name the message, its index and the limit", err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if c.limit == "" {
				mustGet(t, r)
			}
			mustGet(t, good)
			wantCalls := int64(1)
			if st := p.Stats(); st.Retries != 0 {
				t.Fatalf("%d retries, want none", st.Retries)
			}
			if got := e.calls() - before; got != wantCalls {
				t.Fatalf("%d Publish RPCs, want %d (one batch, the refused message never sent)", got, wantCalls)
			}
		})
	}
}

// TestPublishIndexCountsCalls: the index in an invalid message's Error is the
// message's position among the Publisher's Publish calls.
func TestPublishIndexCountsCalls(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		mustGet(t, p.Publish(ctx, msg(i)))
	}
	_, err := p.Publish(ctx, &Message{Attributes: map[string]string{"googx": "v"}}).Get(ctx)
	if !strings.Contains(err.Error(), "message #3") {
		t.Fatalf("%v, want message #3", err)
	}
}

// TestEncodingFailureFailsOnlyItsMessage: a message that becomes
// unencodable after Publish accepted it (its attributes changed to invalid
// UTF-8 while it waited in its batch) fails on its own, at once and
// without retries; the other messages of its batch are published.
func TestEncodingFailureFailsOnlyItsMessage(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			e := newEnv(t)
			p := e.publisher(t, Config{EnableOrdering: true, Delay: maxDelay})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			key := ""
			if ordered {
				key = "k"
			}
			attrs := map[string]string{"a": "ok"}
			before := p.Publish(ctx, &Message{Data: []byte("before"), OrderingKey: key})
			bad := p.Publish(ctx, &Message{Data: []byte("bad"), Attributes: attrs, OrderingKey: key})
			after := p.Publish(ctx, &Message{Data: []byte("after"), OrderingKey: key})
			attrs["a"] = string([]byte{0xff}) // the caller broke its promise not to modify it
			start := time.Now()
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("flush took %v: the encoding failure was retried", d)
			}
			mustGet(t, before)
			mustGet(t, after)
			_, err := bad.Get(ctx)
			var ie *Error
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidMessage) || !strings.Contains(ie.Detail, "encoding") || ie.Err == nil ||
				status.Code(err) != codes.InvalidArgument {
				t.Fatalf("bad message: %v, want an invalid message Error with the encoding error", err)
			}
			st := p.Stats()
			if st.Published != 2 || st.Failed != 1 || st.Retries != 0 {
				t.Fatalf("stats %+v, want 2 published, 1 failed, no retries", st)
			}
			if ordered {
				// The key pauses: what follows would be out of order.
				if _, err := p.Publish(ctx, &Message{Data: []byte("next"), OrderingKey: key}).Get(ctx); !errors.Is(err, ErrPaused) {
					t.Fatalf("after an encoding failure on key: %v, want ErrPaused", err)
				}
			}
		})
	}
}

func TestDelayBound(t *testing.T) {
	for _, d := range []time.Duration{time.Hour, maxDelay + 1, -1} {
		if err := (Config{Delay: d}).Validate(); err == nil || !strings.Contains(err.Error(), "Delay") {
			t.Errorf("Delay %v: %v, want an error naming Delay", d, err)
		}
	}
	if err := (Config{Delay: maxDelay}).Validate(); err != nil {
		t.Errorf("Delay %v: %v", maxDelay, err)
	}
}

// TestNewRefusesBadTopics: topic names the service refuses fail New with
// an error naming the rule, and nothing is left running.
func TestNewRefusesBadTopics(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := pubsubpb.NewPublisherClient(nil) // never called: the name fails first
	for _, topic := range []string{
		"projects/test-project/topics/has space",
		"projects/test-project/topics/ab",
		"projects/test-project/topics/a" + strings.Repeat("b", 255),
		"projects/test-project/topics/goog-topic",
		"projects/test-project/topics/9lives",
		"projects/Test_Project/topics/orders",
	} {
		p, err := NewFromClient(client, topic, Config{})
		if err == nil {
			_ = p.Close()
			t.Errorf("%q accepted", topic)
			continue
		}
		if !strings.Contains(err.Error(), "bad") {
			t.Errorf("%q: %v, want the rule it breaks", topic, err)
		}
	}
}
