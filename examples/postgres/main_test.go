package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExactlyOnceInTheTable: 20,000 messages into a real PostgreSQL with
// every stream killed every 200 ms and 1 batch in 10 failing — half of
// them before the commit, half after it (the commit happened, the ack
// did not) — end as exactly 20,000 rows, each message id once, with
// nothing left outstanding on either side.
func TestExactlyOnceInTheTable(t *testing.T) {
	dsn := startPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	const n = 20000
	srv, err := pubsubtest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	topic, _ := srv.CreateTopic(ctx, "events")
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "events-to-postgres", Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i := 0; i < n; i += 1000 {
		msgs := make([]*pubsubpb.PubsubMessage, 1000)
		for j := range msgs {
			msgs[j] = &pubsubpb.PubsubMessage{Data: fmt.Appendf(nil, `{"event": %d}`, i+j)}
		}
		got, err := srv.Publish(ctx, topic, msgs...)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got {
			ids[id] = true
		}
	}

	// Kill every stream every 200 ms until the run ends, and at least
	// once for every 2,000 messages acked (a fast run takes under a
	// second), so the kills happen however fast the machine is.
	killing, stopKilling := context.WithCancel(ctx)
	kills := make(chan int, 1)
	go func() {
		total := 0
		defer func() { kills <- total }()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last, next := time.Now(), int64(2000)
		for {
			select {
			case <-tick.C:
				if acked := srv.SubscriptionStats(sub).Acked; acked >= next || time.Since(last) >= 200*time.Millisecond {
					if k := srv.KillStreams(codes.Unavailable, "test: stream killed"); k > 0 {
						total += k
						last = time.Now()
						next = acked + 2000
					}
				}
			case <-killing.Done():
				return
			}
		}
	}()

	var batches, failedBefore, failedAfter atomic.Int64
	errInjected := errors.New("injected failure")
	cfg := Config{
		Subscriber: pubsubflow.SubscriberConfig{Conn: srv.ClientConn(), Backoff: gax.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}},
		Workers:    4,
		Batch:      pubsubflow.BatchOptions{Size: 250, Wait: 100 * time.Millisecond},
		Handler: func(write pubsubflow.BatchHandler) pubsubflow.BatchHandler {
			return func(ctx context.Context, ms []*pubsubflow.Message) error {
				switch b := batches.Add(1); {
				case b%20 == 0: // the transaction never commits
					failedBefore.Add(1)
					return errInjected
				case b%20 == 10: // it commits, and the ack is lost
					if err := write(ctx, ms); err != nil {
						return err
					}
					failedAfter.Add(1)
					return errInjected
				}
				return write(ctx, ms)
			}
		},
	}
	start := time.Now()
	var out bytes.Buffer
	err = Consume(ctx, &out, store, sub, cfg, func() bool { return srv.SubscriptionStats(sub).Acked >= n })
	stopKilling()
	killed := <-kills
	took := time.Since(start)
	t.Log(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}

	var rows, distinct int64
	if err := store.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT message_id) FROM events").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n {
		t.Fatalf("%d rows, %d distinct ids; want %d of each", rows, distinct, n)
	}
	dbIDs, err := store.Pool.Query(ctx, "SELECT message_id FROM events")
	if err != nil {
		t.Fatal(err)
	}
	for dbIDs.Next() {
		var id string
		if err := dbIDs.Scan(&id); err != nil {
			t.Fatal(err)
		}
		if !ids[id] {
			t.Fatalf("row %q is no published message", id)
		}
	}
	if err := dbIDs.Err(); err != nil {
		t.Fatal(err)
	}
	ss := srv.SubscriptionStats(sub)
	if ss.Acked != n || ss.Outstanding != 0 || ss.Backlog != 0 {
		t.Fatalf("server: %+v", ss)
	}
	if failedBefore.Load() == 0 || failedAfter.Load() == 0 || killed < 5 || ss.Redelivered == 0 {
		t.Fatalf("the faults did not happen: %d batches failed before commit, %d after, %d streams killed, %d redelivered",
			failedBefore.Load(), failedAfter.Load(), killed, ss.Redelivered)
	}
	t.Logf("%v: %d batches (%d failed before commit, %d after), %d streams killed, %d redelivered",
		took.Round(time.Millisecond), batches.Load(), failedBefore.Load(), failedAfter.Load(), killed, ss.Redelivered)
}

// The program's embedded run writes every message once.
func TestEmbedded(t *testing.T) {
	dsn := startPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var out bytes.Buffer
	if err := runEmbedded(ctx, &out, store, 2000, Config{Workers: 4, Batch: pubsubflow.BatchOptions{Size: 500}}); err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out.String()))
	if !strings.HasPrefix(out.String(), "rows inserted 2000; received 2000, acked 2000, nacked 0, redelivered 0, outstanding 0") {
		t.Fatalf("output: %s", out.String())
	}
}
