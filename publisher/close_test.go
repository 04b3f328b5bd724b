package publisher

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// Close sends every open batch (a delay of an hour notwithstanding), waits
// for every result and stops every goroutine (goleak checks the package);
// later publishes fail with ErrClosed.
func TestCloseFlushesEverything(t *testing.T) {
	e := newEnv(t)
	p, err := New(e.srv.ClientConn(), e.topic, Config{EnableOrdering: true, Delay: maxDelay, MaxMessages: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var results []*Result
	for i := range 250 {
		m := msg(i)
		if i%3 != 0 {
			m.OrderingKey = "k" + strconv.Itoa(i%5)
		}
		results = append(results, p.Publish(context.Background(), m))
	}
	for _, r := range results {
		if settled(r) {
			t.Fatal("a result settled before Close with an hour's delay")
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !settled(r) {
			t.Fatal("Close returned before every result settled")
		}
		mustGet(t, r)
	}
	if got := e.srv.SubscriptionStats(e.sub).Published; got != 250 {
		t.Fatalf("server has %d messages", got)
	}
	if _, err := p.Publish(context.Background(), msg(0)).Get(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Close fails the Publish calls blocked on flow control.
func TestCloseWakesBlockedPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.SetLatency("Publish", time.Second)
		p := e.publisher(t, Config{Flow: FlowConfig{MaxMessages: 1}})
		r1 := p.Publish(context.Background(), msg(1))
		var r2 *Result
		done := make(chan struct{})
		go func() {
			defer close(done)
			r2 = p.Publish(context.Background(), msg(2))
		}()
		synctest.Wait()
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
		if _, err := r2.Get(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked publish: %v", err)
		}
		mustGet(t, r1)
	})
}

// Shutdown with a deadline abandons a publish that cannot finish in time,
// fails its message and still stops every goroutine.
func TestShutdownDeadlineAbandons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.srv.SetLatency("Publish", time.Hour)
		p := e.publisher(t, Config{})
		r := p.Publish(context.Background(), msg(1))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Shutdown took %v", d)
		}
		if _, err := r.Get(context.Background()); err == nil {
			t.Fatal("an abandoned publish succeeded")
		}
	})
}
