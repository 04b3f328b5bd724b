package pubsubflow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	otelcodes "go.opentelemetry.io/otel/codes"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
	"github.com/pubsubflow/pubsubflow/stage"
)

// runBatchesAsync starts RunBatches and returns its result channel.
func runBatchesAsync(ctx context.Context, s *Subscriber, n int, opt BatchOptions, h BatchHandler) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.RunBatches(ctx, n, opt, h) }()
	return ch
}

// stopRun cancels a run and checks it returned nil and left nothing held.
func stopRun(t *testing.T, s *Subscriber, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunBatches: %v", err)
	}
	if st := s.Stats(); st.Outstanding != 0 || st.Leases != 0 || st.Processing != 0 || st.Buffered != 0 {
		t.Fatalf("after the run: %+v", st)
	}
}

// TestRunBatchesBudgetFlush: batches of 500 under a budget of 100 are
// handed on as soon as the budget is spent, not after their minute.
func TestRunBatchesBudgetFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 1000, nil)
		s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 100})
		start := time.Now()
		var mu sync.Mutex
		var sizes []int
		ctx, cancel := context.WithCancel(context.Background())
		done := runBatchesAsync(ctx, s, 4, BatchOptions{Size: 500, Wait: time.Minute}, func(ctx context.Context, ms []*Message) error {
			mu.Lock()
			sizes = append(sizes, len(ms))
			mu.Unlock()
			return nil
		})
		waitFor(t, "1000 acks", 20*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 1000 })
		took := time.Since(start)
		stopRun(t, s, cancel, done)
		if took >= time.Minute {
			t.Fatalf("1000 messages took %v with a budget of 100: batches waited out their minute: %v", took, sizes)
		}
		total := 0
		for _, n := range sizes {
			if n > 100 {
				t.Fatalf("a batch of %d under a budget of 100", n)
			}
			total += n
		}
		if total != 1000 {
			t.Fatalf("handled %d messages in %d batches", total, len(sizes))
		}
		t.Logf("%d batches in %v (virtual): %v", len(sizes), took, sizes)
	})
}

// TestRunBatchesNackOnePerBatch: a handler that nacks one message of each
// batch of 100 and returns nil gets exactly those messages again, and
// every other message is acked once.
func TestRunBatchesNackOnePerBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		ids := e.publish(t, 1000, nil)
		s := e.subscriber(t, SubscriberConfig{})
		var mu sync.Mutex
		nacked := map[string]int{}
		again := map[string]int{}
		batches := 0
		ctx, cancel := context.WithCancel(context.Background())
		done := runBatchesAsync(ctx, s, 4, BatchOptions{Size: 100}, func(ctx context.Context, ms []*Message) error {
			mu.Lock()
			defer mu.Unlock()
			if len(ms) > 100 {
				t.Errorf("a batch of %d", len(ms))
			}
			batches++
			for _, m := range ms {
				if m.DeliveryAttempt > 1 {
					again[m.ID]++
				}
			}
			for _, m := range ms {
				if m.DeliveryAttempt == 1 {
					nacked[m.ID]++
					m.Nack() // a bad row
					break
				}
			}
			return nil // the rest is acked
		})
		waitFor(t, "1000 acks", 10*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 1000 })
		stopRun(t, s, cancel, done)
		if len(nacked) == 0 || !maps.Equal(nacked, again) {
			t.Fatalf("nacked %v\nredelivered %v", slices.Sorted(maps.Keys(nacked)), slices.Sorted(maps.Keys(again)))
		}
		ss := e.srv.SubscriptionStats(e.sub)
		if ss.Redelivered != int64(len(nacked)) || ss.Nacked != int64(len(nacked)) || ss.Expired != 0 {
			t.Fatalf("nacked %d: server %+v", len(nacked), ss)
		}
		for _, id := range ids {
			if st := e.srv.MessageStats(id); st.Acks != 1 || st.Deliveries != 1+int64(nacked[id]) {
				t.Fatalf("message %s: %+v", id, st)
			}
		}
		t.Logf("%d batches, %d nacked and redelivered", batches, len(nacked))
	})
}

// TestRunBatchesLongWaitNoExpiry: messages wait 30 s for their batch with
// a stream ack deadline of 10 s; their leases are extended meanwhile, so
// none expires and none is redelivered.
func TestRunBatchesLongWaitNoExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 50, nil)
		s := e.subscriber(t, SubscriberConfig{StreamAckDeadline: 10 * time.Second})
		var waited atomic.Int64
		var handled atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		done := runBatchesAsync(ctx, s, 2, BatchOptions{Size: 100, Wait: 30 * time.Second}, func(ctx context.Context, ms []*Message) error {
			waited.Store(int64(time.Since(ms[0].ReceiveTime)))
			handled.Add(int64(len(ms)))
			return nil
		})
		waitFor(t, "50 acks", 5*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 50 })
		stopRun(t, s, cancel, done)
		if w := time.Duration(waited.Load()); w < 29*time.Second {
			t.Fatalf("the batch waited only %v: the test needs it to wait out 30 s", w)
		}
		ss := e.srv.SubscriptionStats(e.sub)
		if ss.Expired != 0 || ss.Redelivered != 0 || s.Stats().Expired != 0 || handled.Load() != 50 {
			t.Fatalf("server %+v, client %+v, handled %d", ss, s.Stats(), handled.Load())
		}
		if ss.ModAcks == 0 {
			t.Fatalf("no lease was extended: %+v", ss)
		}
	})
}

// TestRunBatchesOrdering: 20 keys × 500 messages; each batch holds one
// key's messages in publish order, a key's batches are handled in order
// and never overlap, keys run in parallel. Ordered by the server (one
// message of a key out at a time) and by the client (Ordering on a
// subscription that does not order, so a key's messages arrive together).
func TestRunBatchesOrdering(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   pubsubtest.SubscriptionConfig
		cfg  SubscriberConfig
	}{
		{"server", pubsubtest.SubscriptionConfig{EnableMessageOrdering: true}, SubscriberConfig{}},
		{"client", pubsubtest.SubscriptionConfig{}, SubscriberConfig{Ordering: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const keys, perKey = 20, 500
				e := newEnvSub(t, tc.sc, pubsubtest.WithBufconn())
				e.publish(t, keys*perKey, func(i int) string { return "k" + strconv.Itoa(i%keys) })
				s := e.subscriber(t, tc.cfg)
				var (
					mu         sync.Mutex
					last       = map[string]int{}
					active     = map[string]bool{}
					violations []string
					parallel   int
					running    int
					batches    int
					biggest    int
				)
				violate := func(f string, args ...any) {
					if len(violations) < 5 {
						violations = append(violations, fmt.Sprintf(f, args...))
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := runBatchesAsync(ctx, s, 8, BatchOptions{Size: 100, Wait: 20 * time.Millisecond}, func(ctx context.Context, ms []*Message) error {
					key := ms[0].OrderingKey
					mu.Lock()
					if active[key] {
						violate("key %s: two batches at once", key)
					}
					active[key] = true
					running++
					parallel = max(parallel, running)
					batches++
					biggest = max(biggest, len(ms))
					for _, m := range ms {
						n, _ := strconv.Atoi(string(m.Data))
						if m.OrderingKey != key {
							violate("a batch mixes keys %s and %s", key, m.OrderingKey)
						}
						if prev, ok := last[key]; ok && n <= prev {
							violate("key %s: %d after %d", key, n, prev)
						}
						last[key] = n
					}
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					mu.Lock()
					active[key] = false
					running--
					mu.Unlock()
					return nil
				})
				waitFor(t, "all acked", time.Hour, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == keys*perKey })
				stopRun(t, s, cancel, done)
				if len(violations) > 0 {
					t.Fatal(strings.Join(violations, "\n"))
				}
				if len(last) != keys || parallel < 2 {
					t.Fatalf("saw %d keys, at most %d batches at once", len(last), parallel)
				}
				if ss := e.srv.SubscriptionStats(e.sub); ss.Redelivered != 0 {
					t.Fatalf("%d redelivered", ss.Redelivered)
				}
				t.Logf("%d batches, biggest %d, up to %d at once", batches, biggest, parallel)
			})
		})
	}
}

// TestRunBatchesPanicAndError: a panicking handler's unsettled messages
// are nacked (what it acked stays acked), an error nacks the unsettled
// ones, and the subscriber goes on.
func TestRunBatchesPanicAndError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		ids := e.publish(t, 20, nil)
		s := e.subscriber(t, SubscriberConfig{})
		var calls atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		done := runBatchesAsync(ctx, s, 1, BatchOptions{Size: 10, Wait: time.Second}, func(ctx context.Context, ms []*Message) error {
			switch calls.Add(1) {
			case 1:
				ms[0].Ack()
				panic("bad batch")
			case 2:
				ms[0].Ack()
				return errors.New("write failed")
			}
			return nil
		})
		waitFor(t, "20 acks", 10*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 20 })
		stopRun(t, s, cancel, done)
		var pe *stage.PanicError
		if !errors.As(s.Stats().LastError, &pe) || pe.Value != "bad batch" {
			t.Fatalf("LastError %v, want the panic", s.Stats().LastError)
		}
		redelivered := 0
		for _, id := range ids {
			st := e.srv.MessageStats(id)
			if st.Acks != 1 {
				t.Fatalf("message %s: %+v", id, st)
			}
			redelivered += int(st.Deliveries - 1)
		}
		if redelivered != 18 {
			t.Fatalf("%d redeliveries, want the 9 + 9 unsettled messages of the failed batches", redelivered)
		}
	})
}

func TestRunBatchesBadArguments(t *testing.T) {
	e := newEnv(t)
	s := e.subscriber(t, SubscriberConfig{})
	h := func(context.Context, []*Message) error { return nil }
	for _, tc := range []struct {
		n    int
		opt  BatchOptions
		h    BatchHandler
		want string
	}{
		{0, BatchOptions{}, h, "parallelism"},
		{1, BatchOptions{}, nil, "nil handler"},
		{1, BatchOptions{Size: -1}, h, "BatchOptions.Size"},
		{1, BatchOptions{Bytes: -1}, h, "BatchOptions.Bytes"},
		{1, BatchOptions{Wait: -time.Second}, h, "BatchOptions.Wait"},
	} {
		if err := s.RunBatches(context.Background(), tc.n, tc.opt, tc.h); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RunBatches(%d, %+v): %v, want an error naming %s", tc.n, tc.opt, err, tc.want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.RunBatches(context.Background(), 1, BatchOptions{}, h); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestRunBatchesDrainHandlesOpenBatches: stopping the run hands the
// messages waiting in an open batch to the handler at once (they are
// received and leased: processing them beats nacking them), and the run
// returns without waiting out Wait or the drain timeout.
func TestRunBatchesDrainHandlesOpenBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.publish(t, 30, nil)
		s := e.subscriber(t, SubscriberConfig{DrainTimeout: time.Minute})
		var handled atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		done := runBatchesAsync(ctx, s, 2, BatchOptions{Size: 100, Wait: time.Hour}, func(ctx context.Context, ms []*Message) error {
			handled.Add(int64(len(ms)))
			return nil
		})
		waitFor(t, "30 waiting in a batch", time.Minute, func() bool { return s.Stats().Processing == 30 })
		synctest.Wait()
		if handled.Load() != 0 {
			t.Fatalf("%d handled before the batch was full or due", handled.Load())
		}
		begin := time.Now()
		stopRun(t, s, cancel, done)
		if took := time.Since(begin); took > 5*time.Second {
			t.Fatalf("stopping took %v", took)
		}
		if handled.Load() != 30 || e.srv.SubscriptionStats(e.sub).Acked != 30 {
			t.Fatalf("handled %d, acked %d", handled.Load(), e.srv.SubscriptionStats(e.sub).Acked)
		}
	})
}

// TestRunBatchesTraced: with a TracerProvider every message of a batch
// gets its process span, ended when the handler returned (with an error
// status for a failed batch), and nothing is left open.
func TestRunBatchesTraced(t *testing.T) {
	sp := newSpans(t)
	e := newEnv(t)
	e.publish(t, 40, nil)
	s := e.subscriber(t, SubscriberConfig{TracerProvider: sp.tp})
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := runBatchesAsync(ctx, s, 2, BatchOptions{Size: 10, Wait: 10 * time.Millisecond}, func(ctx context.Context, ms []*Message) error {
		if calls.Add(1) == 1 {
			return errors.New("write failed")
		}
		return nil
	})
	waitFor(t, "40 acks", time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 40 })
	stopRun(t, s, cancel, done)
	processed := sp.named("sub process")
	failed := 0
	for _, p := range processed {
		if p.Status.Code == otelcodes.Error {
			failed++
		}
	}
	if len(processed) != 40+failed || failed == 0 || failed > 10 {
		t.Fatalf("%d process spans, %d with an error status", len(processed), failed)
	}
	sp.checkAllEnded(t)
}

// TestRunBatchesBytes: batches never exceed Bytes (as Message.Size counts
// them) but for a message larger than Bytes, which goes alone.
func TestRunBatchesBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, pubsubtest.WithBufconn())
		e.fix.Publish(t, pubsubtest.Messages(200, func(i int, m *pubsubpb.PubsubMessage) {
			m.Data = make([]byte, 100+(i%7)*150)
		})...)
		s := e.subscriber(t, SubscriberConfig{})
		var mu sync.Mutex
		var bad []string
		ctx, cancel := context.WithCancel(context.Background())
		done := runBatchesAsync(ctx, s, 2, BatchOptions{Size: 100, Bytes: 1000, Wait: time.Second}, func(ctx context.Context, ms []*Message) error {
			n := 0
			for _, m := range ms {
				n += m.Size()
			}
			if n > 1000 && len(ms) > 1 {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("%d messages of %d bytes", len(ms), n))
				mu.Unlock()
			}
			return nil
		})
		waitFor(t, "200 acks", time.Hour, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 200 })
		stopRun(t, s, cancel, done)
		if len(bad) > 0 {
			t.Fatalf("batches over 1000 bytes: %v", bad)
		}
	})
}

// TestRunBatchesSettlesWhatWasHanded: the handler's slice is its own. A
// handler that filters it in place, sets an element to nil, or reslices
// it and appends over the record, and returns nil, has exactly the
// messages it was handed acked, each once, under a budget of 20 (a message
// left unsettled would hold its permit until shutdown and stall the run).
func TestRunBatchesSettlesWhatWasHanded(t *testing.T) {
	for name, mangle := range map[string]func(ms []*Message){
		"filter in place": func(ms []*Message) {
			kept := ms[:0]
			for _, m := range ms {
				if n, _ := strconv.Atoi(string(m.Data)); n%5 != 0 {
					kept = append(kept, m)
				}
			}
			clear(ms[len(kept):])
		},
		"nil elements": func(ms []*Message) {
			ms[0] = nil
			ms[len(ms)-1] = nil
		},
		"reslice": func(ms []*Message) {
			head := ms[:1]
			for range len(ms) - 1 {
				head = append(head, ms[0]) // writes over the rest of the batch
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, pubsubtest.WithBufconn())
				ids := e.publish(t, 100, nil)
				s := e.subscriber(t, SubscriberConfig{MaxOutstandingMessages: 20})
				var mu sync.Mutex
				handed := map[string]int{}
				ctx, cancel := context.WithCancel(context.Background())
				done := runBatchesAsync(ctx, s, 2, BatchOptions{Size: 10, Wait: time.Second}, func(ctx context.Context, ms []*Message) error {
					mu.Lock()
					for _, m := range ms {
						handed[m.ID]++
					}
					mu.Unlock()
					mangle(ms)
					return nil
				})
				waitFor(t, "100 acks", 5*time.Minute, func() bool { return e.srv.SubscriptionStats(e.sub).Acked == 100 })
				stopRun(t, s, cancel, done)
				for _, id := range ids {
					if st := e.srv.MessageStats(id); st.Acks != 1 || st.Deliveries != 1 || handed[id] != 1 {
						t.Fatalf("message %s handed %d times: %+v", id, handed[id], st)
					}
				}
			})
		})
	}
}
