package pubsubflow

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// firstOfEven refuses the first delivery of each even-numbered message
// and keeps everything else: a drop that a second try undoes.
func firstOfEven() func(*Message) bool {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(m *Message) bool {
		i, _ := strconv.Atoi(string(m.Data))
		mu.Lock()
		defer mu.Unlock()
		again := seen[m.ID]
		seen[m.ID] = true
		return i%2 == 1 || again
	}
}

// runFiltered runs sub.Source() → f → Acknowledge until the server has
// acked want messages, then closes the subscriber and returns its Stats
// and the server's.
func runFiltered(t *testing.T, e *env, s *Subscriber, f stage.Flow[*Message, *Message], want int64, within time.Duration) (Stats, pubsubtest.SubStats) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- pipeline.From(s.Source()).Via(f).To(s.Acknowledge()) }()
	waitFor(t, strconv.FormatInt(want, 10)+" acks", within, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == want })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return s.Stats(), e.srv.SubscriptionStats(e.sub)
}

// TestFilterAckDropsForGood: Filter(keep, Ack) acks what keep refuses at
// once; the server forgets it and never redelivers it.
func TestFilterAckDropsForGood(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 100, nil)
	s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 10})
	odd := Filter(func(m *Message) bool { i, _ := strconv.Atoi(string(m.Data)); return i%2 == 1 }, Ack)
	st, srv := runFiltered(t, e, s, odd, 100, 30*time.Second)
	if srv.Acked != 100 || srv.Nacked != 0 || srv.Redelivered != 0 || srv.Backlog != 0 || st.Received != 100 || st.Acked != 100 {
		t.Fatalf("subscriber %+v\nserver %+v", st, srv)
	}
}

// TestFilterNackTriesAgain: Filter(keep, Nack) nacks what keep refuses;
// the server redelivers it at once, and keep takes it the second time.
func TestFilterNackTriesAgain(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 100, nil)
	s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 10})
	st, srv := runFiltered(t, e, s, Filter(firstOfEven(), Nack), 100, 30*time.Second)
	if srv.Acked != 100 || srv.Nacked != 50 || srv.Redelivered != 50 || srv.Expired != 0 || st.Nacked != 50 || st.Acked != 100 {
		t.Fatalf("subscriber %+v\nserver %+v", st, srv)
	}
}

// TestFilterNackLoop: a message keep always refuses, dropped with Nack,
// comes back at once, for ever: the nack loop the docs warn of. It is
// nacked a hundred times well within one ack deadline.
func TestFilterNackLoop(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 1, nil)
	s := e.subscriber(t, SubscriberConfig{})
	never := Filter(func(*Message) bool { return false }, Nack)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- pipeline.From(s.Source()).Via(never).To(s.Acknowledge()) }()
	waitFor(t, "100 nacks of one message", 30*time.Second, func() bool { return e.srv.SubscriptionStats(e.sub).Nacked >= 100 })
	if took := time.Since(start); took >= 10*time.Second {
		t.Errorf("100 nacks took %v, want the loop faster than the 10 s ack deadline", took)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if srv := e.srv.SubscriptionStats(e.sub); srv.Acked != 0 || srv.Backlog+srv.Outstanding != 1 {
		t.Fatalf("server %+v", srv)
	}
}

// TestFilterNoOpLetsTheDeadlinePass: Filter(keep, NoOp) sends nothing for
// what keep refuses; the server redelivers it when its deadline passes.
func TestFilterNoOpLetsTheDeadlinePass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 20, nil)
		s := e.subscriber(t, SubscriberConfig{})
		st, srv := runFiltered(t, e, s, Filter(firstOfEven(), NoOp), 20, 5*time.Minute)
		if srv.Acked != 20 || srv.Nacked != 0 || srv.Expired != 10 || srv.Redelivered != 10 || st.NoOps != 10 || st.Acked != 20 {
			t.Fatalf("subscriber %+v\nserver %+v", st, srv)
		}
	})
}

// TestFilterRefusesOtherOutcomes: Filter takes Ack, Nack or NoOp; any
// other drop ends the pipeline with an error naming it.
func TestFilterRefusesOtherOutcomes(t *testing.T) {
	for _, bad := range []Outcome{0, NackAfter, Outcome(42)} {
		err := pipeline.From(pipeline.Slice[*Message]()).Via(Filter(func(*Message) bool { return true }, bad)).
			To(pipeline.ForEach(func(context.Context, *Message) error { return nil }))
		if err == nil || !strings.Contains(err.Error(), "Filter: drop") {
			t.Errorf("drop %v: got %v", bad, err)
		}
	}
}

// TestPipelineFilterUnsettledDropEnds: pipeline.Filter on messages with a
// dropped that leaves the message unsettled ends the pipeline at once
// with an error (instead of holding the message until its lease ends);
// Close then nacks what was handed out.
func TestPipelineFilterUnsettledDropEnds(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 20, nil)
	s := e.subscriber(t, SubscriberConfig{})
	silent := pipeline.Filter(func(m *Message) bool { return string(m.Data) != "7" }, func(*Message) {})
	err := pipeline.From(s.Source()).Via(silent).To(s.Acknowledge())
	if err == nil || !strings.Contains(err.Error(), "dropped returned with the message unsettled") {
		t.Fatalf("pipeline = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Outstanding != 0 || st.Received != st.Acked+st.Nacked+st.NoOps+st.Expired+st.AckRefused || st.Acked >= 20 {
		t.Fatalf("after Close: %+v", st)
	}
}
