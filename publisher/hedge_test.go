package publisher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// The tests run in virtual time over bufconn gRPC: the server's stalls
// and latencies, and the hedging delay, are exact.

// A stalled Publish is hedged after Delay; the hedge's success settles
// the batch at once, the stalled attempt is cancelled (the server sees it
// end), and Close does not wait for it. The stalled call had stored its
// messages: the documented duplicate.
func TestHedgeFirstSuccessWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer tp.Shutdown(context.Background())
		p := e.publisher(t, Config{TracerProvider: tp, Hedging: HedgingConfig{Delay: 100 * time.Millisecond}})
		e.srv.StallEvery("Publish", 2, time.Minute) // the 2nd call from now answers after a minute
		mustGet(t, p.Publish(context.Background(), msg(0)))
		start := time.Now()
		mustGet(t, p.Publish(context.Background(), msg(1)))
		if took := time.Since(start); took != defaultDelay+100*time.Millisecond {
			t.Fatalf("publish took %v, want the batch delay and the hedging delay", took)
		}
		synctest.Wait()
		if st := e.srv.MethodStats("Publish"); st.Calls != 3 || st.Errors != 1 {
			t.Fatalf("server %+v, want 3 calls, the stalled one cancelled", st)
		}
		if st := p.Stats(); st.HedgedAttempts != 1 || st.HedgeWins != 1 || st.HedgesRefused != 0 || st.Published != 2 {
			t.Fatalf("stats %+v", st)
		}
		if got := e.srv.SubscriptionStats(e.sub).Published; got != 3 {
			t.Fatalf("server holds %d messages, want 3 (message 1 twice)", got)
		}
		closed := time.Now()
		if err := p.Close(); err != nil || time.Since(closed) != 0 {
			t.Fatalf("Close = %v after %v", err, time.Since(closed))
		}
		var events []string
		for _, s := range spansNamed(exp, "topic publish") {
			for _, ev := range s.Events {
				events = append(events, fmt.Sprint(ev.Name, " ", ev.Attributes[0].Value.AsInt64()))
			}
		}
		want := "[publish attempt start 0 publish attempt end 0 publish attempt start 0 publish attempt start 1 publish attempt end 1 publish attempt end 0]"
		if fmt.Sprint(events) != want {
			t.Fatalf("publish span events %v, want %v", events, want)
		}
	})
}

// When every attempt fails, the batch fails once, with the first
// attempt's error.
func TestHedgeAllFailingFailsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		p := e.publisher(t, Config{Hedging: HedgingConfig{Delay: 100 * time.Millisecond, MaxExtra: 2}})
		e.srv.SetLatency("Publish", time.Second)
		e.srv.FailNext("Publish", 3, codes.PermissionDenied)
		_, err := p.Publish(context.Background(), msg(1)).Get(context.Background())
		if status.Code(err) != codes.PermissionDenied || strings.Count(err.Error(), "injected fault") != 1 {
			t.Fatalf("err = %v, want one PermissionDenied", err)
		}
		if st := p.Stats(); st.Failed != 1 || st.Published != 0 || st.HedgedAttempts != 2 || st.HedgeWins != 0 {
			t.Fatalf("stats %+v", st)
		}
		if got := e.calls(); got != 3 {
			t.Fatalf("%d calls, want 3", got)
		}
	})
}

// The token bucket: while publishes fail, hedging stops once its tokens
// are spent (each refused hedge counted); successes earn them back.
func TestHedgeTokenBucketStopsWhenPublishesFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		p := e.publisher(t, Config{MaxMessages: 1, MaxInFlightBatches: 1,
			Hedging: HedgingConfig{Delay: 100 * time.Millisecond, Tokens: 2, SuccessesPerToken: 3}})
		e.srv.SetLatency("Publish", time.Second)
		e.srv.FailNext("Publish", 1000, codes.PermissionDenied)
		for i := range 5 {
			if _, err := p.Publish(context.Background(), msg(i)).Get(context.Background()); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		if st := p.Stats(); st.HedgedAttempts != 2 || st.HedgesRefused != 3 || e.calls() != 7 {
			t.Fatalf("stats %+v, %d calls; want 2 hedges, 3 refused, 7 calls", st, e.calls())
		}
		e.srv.FailNext("Publish", 0, codes.OK)
		e.srv.SetLatency("Publish", 0)
		for i := range 3 { // three successes earn one token
			mustGet(t, p.Publish(context.Background(), msg(i)))
		}
		e.srv.SetLatency("Publish", time.Second)
		mustGet(t, p.Publish(context.Background(), msg(9)))
		mustGet(t, p.Publish(context.Background(), msg(10)))
		if st := p.Stats(); st.HedgedAttempts != 3 || st.HedgesRefused != 4 || st.HedgeWins != 0 {
			t.Fatalf("stats %+v; want one more hedge, then one more refusal", st)
		}
	})
}

// A batch with an ordering key is never hedged, however slow; an
// unordered batch of the same publisher is.
func TestHedgeNeverForOrderingKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		p := e.publisher(t, Config{EnableOrdering: true, Hedging: HedgingConfig{Delay: 100 * time.Millisecond}})
		e.srv.SetLatency("Publish", time.Second)
		mustGet(t, p.Publish(context.Background(), &Message{Data: []byte("a"), OrderingKey: "k"}))
		if st := p.Stats(); st.HedgedAttempts != 0 || st.HedgesRefused != 0 || e.calls() != 1 {
			t.Fatalf("ordered: stats %+v, %d calls", st, e.calls())
		}
		mustGet(t, p.Publish(context.Background(), msg(1)))
		if st := p.Stats(); st.HedgedAttempts != 1 || e.calls() != 3 {
			t.Fatalf("unordered: stats %+v, %d calls", st, e.calls())
		}
	})
}

// Shutdown past its deadline cancels every attempt still in flight, the
// hedges too: the server sees each call end, and no goroutine is left.
func TestHedgeShutdownCancelsAttemptsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		p := e.publisher(t, Config{Hedging: HedgingConfig{Delay: 100 * time.Millisecond, MaxExtra: 2}})
		e.srv.StallEvery("Publish", 1, time.Hour)
		r := p.Publish(context.Background(), msg(1))
		time.Sleep(time.Second) // virtual: the attempt and both hedges start
		synctest.Wait()
		if got := e.calls(); got != 3 {
			t.Fatalf("%d calls in flight, want 3", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v", err)
		}
		if _, err := r.Get(context.Background()); err == nil {
			t.Fatal("the abandoned publish succeeded")
		}
		synctest.Wait()
		if st := e.srv.MethodStats("Publish"); st.Errors != 3 {
			t.Fatalf("server %+v, want all 3 calls ended", st)
		}
	})
}
