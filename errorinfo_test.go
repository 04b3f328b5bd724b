package pubsubflow

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/flow"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// logs is a slog.Handler that keeps every record's level and message.
type logs struct {
	mu   sync.Mutex
	recs []string // "WARN message"
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }

func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Level.String()+" "+r.Message)
	l.mu.Unlock()
	return nil
}

// count returns how many records at level have a message containing part.
func (l *logs) count(level slog.Level, part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.HasPrefix(r, level.String()+" ") && strings.Contains(r, part) {
			n++
		}
	}
	return n
}

// withInfo is a status of code carrying an AIP-193 ErrorInfo with no
// per-ack-id reasons.
func withInfo(t *testing.T, code codes.Code, info *errdetails.ErrorInfo) *status.Status {
	t.Helper()
	st, err := status.New(code, "test: "+info.Reason).WithDetails(info)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var (
	rateLimited = &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "googleapis.com",
		Metadata: map[string]string{"quota_limit": "AckRequestsPerMinute", "service": "pubsub.googleapis.com"}}
	iamDenied = &errdetails.ErrorInfo{Reason: "IAM_PERMISSION_DENIED", Domain: "iam.googleapis.com",
		Metadata: map[string]string{"permission": "pubsub.subscriptions.consume", "resource": "projects/p/subscriptions/sub"}}
)

// TestAckErrorInfoWithoutReasonsRetried: an Acknowledge that fails with
// RESOURCE_EXHAUSTED and an ErrorInfo (RATE_LIMIT_EXCEEDED) is the whole
// RPC's transient failure: it is retried, and every ack lands once.
func TestAckErrorInfoWithoutReasonsRetried(t *testing.T) {
	e := newEnv(t)
	e.publish(t, 5, nil)
	e.srv.FailNextWith("Acknowledge", 1, withInfo(t, codes.ResourceExhausted, rateLimited))
	s := e.subscriber(t, SubscriberConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, s, 5, func(context.Context, *Message) error { return nil })
	waitFor(t, "5 acks applied by the server", 30*time.Second, func() bool {
		return e.srv.SubscriptionStats(e.sub).Acked == 5
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ms := e.srv.MethodStats("Acknowledge"); ms.Injected != 1 || ms.Calls < 2 {
		t.Fatalf("Acknowledge stats %+v, want the injected failure and a retry", ms)
	}
	if st := s.Stats(); st.Acked != 5 || st.AckFailures != 0 {
		t.Fatalf("stats %+v, want 5 acked and no failure", st)
	}
}

// TestAckErrorInfoWithoutReasonsFails: an Acknowledge that fails with
// PERMISSION_DENIED and an IAM ErrorInfo fails every ack id of the
// request: none is counted as acked, each is an AckFailure, the failure is
// logged, and on exactly-once the AckResult says so.
func TestAckErrorInfoWithoutReasonsFails(t *testing.T) {
	for _, eo := range []bool{false, true} {
		t.Run(map[bool]string{false: "at-least-once", true: "exactly-once"}[eo], func(t *testing.T) {
			e := newEnvSub(t, pubsubtest.SubscriptionConfig{EnableExactlyOnceDelivery: eo})
			e.publish(t, 5, nil)
			e.srv.FailNextWith("Acknowledge", 1000, withInfo(t, codes.PermissionDenied, iamDenied))
			l := &logs{}
			s := e.subscriber(t, SubscriberConfig{Logger: slog.New(l)})
			var mu sync.Mutex
			var results []error
			ctx, cancel := context.WithCancel(context.Background())
			done := runAsync(ctx, s, 5, func(ctx context.Context, m *Message) error {
				m.Ack()
				if r := m.Result(); r != nil {
					err := r.Get(ctx)
					mu.Lock()
					results = append(results, err)
					mu.Unlock()
				}
				return nil
			})
			waitFor(t, "5 ack failures", 30*time.Second, func() bool { return s.Stats().AckFailures == 5 })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.Acked != 0 || st.AckFailures != 5 {
				t.Fatalf("stats %+v, want 0 acked and 5 ack failures", st)
			}
			if got := e.srv.SubscriptionStats(e.sub).Acked; got != 0 {
				t.Fatalf("server applied %d acks, want 0", got)
			}
			if l.count(slog.LevelWarn, "failed for good") == 0 {
				t.Fatalf("no Warn for the failed acks; logs %v", l.recs)
			}
			if !eo {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if len(results) != 5 {
				t.Fatalf("%d AckResults, want 5", len(results))
			}
			for _, err := range results {
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("AckResult = %v, want PERMISSION_DENIED", err)
				}
			}
		})
	}
}

// TestModackErrorInfoWithoutReasonsConfirmsNoLease: when every modack fails
// with PERMISSION_DENIED and an IAM ErrorInfo, no lease is extended: a
// handler that holds its message past the server's deadline finds it
// expired (Ack reports false), and nothing is counted as acked. Run ends
// with flow.ErrModacksFailing, not a silent loop of redeliveries.
func TestModackErrorInfoWithoutReasonsConfirmsNoLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnvSub(t, pubsubtest.SubscriptionConfig{AckDeadline: 10 * time.Second}, pubsubtest.WithBufconn())
		e.publish(t, 5, nil)
		e.srv.FailNextWith("ModifyAckDeadline", 1_000_000, withInfo(t, codes.PermissionDenied, iamDenied))
		s := e.subscriber(t, SubscriberConfig{StreamAckDeadline: 10 * time.Second})
		var mu sync.Mutex
		var acks []bool
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, s, 5, func(ctx context.Context, m *Message) error {
			time.Sleep(30 * time.Second) // past the 10 s server deadline
			ok := m.Ack()
			mu.Lock()
			acks = append(acks, ok)
			mu.Unlock()
			return nil
		})
		waitFor(t, "5 handlers done", time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acks) >= 5
		})
		cancel()
		if err := <-done; !errors.Is(err, flow.ErrModacksFailing) {
			t.Fatalf("Run: %v, want flow.ErrModacksFailing", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ok := range acks[:5] {
			if ok {
				t.Fatalf("Ack() = true on a message whose lease was never extended (acks %v); stats %+v; server %+v", acks, s.Stats(), e.srv.SubscriptionStats(e.sub))
			}
		}
		if st := s.Stats(); st.Acked != 0 || st.Expired < 5 {
			t.Fatalf("stats %+v, want 0 acked and the 5 expired", st)
		}
		if got := e.srv.SubscriptionStats(e.sub).Acked; got != 0 {
			t.Fatalf("server applied %d acks, want 0", got)
		}
	})
}
