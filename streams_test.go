package pubsubflow

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// lockedBuffer is a log destination safe for the goroutines that log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dropBelow is a go-streams Filter, inside Streams, that drops the
// messages whose number is below n.
func dropBelow(n int, opt StreamsOptions) stage.Flow[*Message, *Message] {
	return Streams(func(_ *stage.Group, in streams.Source) streams.Outlet {
		return in.Via(gsflow.NewFilter(func(m *Message) bool {
			i, _ := strconv.Atoi(string(m.Data))
			return i >= n
		}, 1))
	}, opt)
}

// TestStreamsFilterDropsFirstDrains: with a budget of 200 and a backlog
// that starts with 200 messages a go-streams Filter drops, the graph
// holds the whole budget; Hold (the default, a minute) after they went
// in they are settled with Lost (Ack), counted, and logged in one Warn
// naming the graph, and the kept messages then get through.
func TestStreamsFilterDropsFirstDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 300, nil)
		var logs lockedBuffer
		s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 200,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		start := time.Now()
		f := dropBelow(200, StreamsOptions{Name: "orders-filter", Lost: Ack})
		done := make(chan error, 1)
		go func() { done <- pipeline.From(s.Source()).Via(f).To(s.Acknowledge()) }()
		waitFor(t, "300 acks", 5*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 300 })
		if took := time.Since(start); took < DefaultStreamsHold*7/8 || took > DefaultStreamsHold+10*time.Second {
			t.Errorf("drained after %v, want about DefaultStreamsHold (%v)", took, DefaultStreamsHold)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		if st.StreamsLost != 200 || st.Acked != 300 || st.Nacked != 0 || st.Outstanding != 0 {
			t.Fatalf("stats: %+v", st)
		}
		warns := strings.Count(logs.String(), "did not come out within its Hold")
		if warns != 1 || !strings.Contains(logs.String(), "graph=orders-filter count=200") {
			t.Fatalf("want one Warn with graph=orders-filter count=200, got %d:\n%s", warns, logs.String())
		}
	})
}

// TestStreamsLostDefaultsToNack: by default what the graph holds for
// Hold is nacked, and its redelivery goes through again.
func TestStreamsLostDefaultsToNack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 20, nil)
		s := e.subscriber(t, SubscriberConfig{Logger: slog.New(slog.DiscardHandler)})
		var mu sync.Mutex
		seen := map[string]bool{}
		once := Streams(func(_ *stage.Group, in streams.Source) streams.Outlet {
			return in.Via(gsflow.NewFilter(func(m *Message) bool { // drops each message's first delivery
				mu.Lock()
				defer mu.Unlock()
				again := seen[m.ID]
				seen[m.ID] = true
				return again
			}, 1))
		}, StreamsOptions{Hold: 10 * time.Second})
		done := make(chan error, 1)
		go func() { done <- pipeline.From(s.Source()).Via(once).To(s.Acknowledge()) }()
		waitFor(t, "20 acks", time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 20 })
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.StreamsLost != 20 || st.Nacked != 20 || st.Acked != 20 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// TestStreamsOptionsErrors: a bad option ends the pipeline with an error
// naming it.
func TestStreamsOptionsErrors(t *testing.T) {
	for name, opt := range map[string]StreamsOptions{
		"StreamsOptions.Hold":      {Hold: -time.Second},
		"StreamsOptions.Lost":      {Lost: Outcome(42)},
		"StreamsOptions.NackDelay": {Lost: NackAfter, NackDelay: time.Hour},
	} {
		err := pipeline.From(pipeline.Slice[*Message]()).Via(dropBelow(0, opt)).To(pipeline.ForEach(func(context.Context, *Message) error { return nil }))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}
