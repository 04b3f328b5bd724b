package suite

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow"
)

// stopTimeout bounds how long a stopped Subscriber may take to return
// (its drain timeout is 30 s by default).
const stopTimeout = 60 * time.Second

// running is one of our Subscribers in Run on a goroutine of the test.
type running struct {
	sub    *pubsubflow.Subscriber
	cancel context.CancelFunc
	done   chan error
}

// start makes a Subscriber on subscription over the env's connection and
// runs it with parallelism workers and h until stop (or the test's end).
func (e *env) start(t *testing.T, subscription string, cfg pubsubflow.SubscriberConfig, parallelism int, h pubsubflow.Handler) *running {
	t.Helper()
	cfg.Conn = e.conn
	s, err := pubsubflow.NewSubscriber(bounded(t, adminTimeout), subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{sub: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx, parallelism, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(stopTimeout):
			t.Errorf("Run did not return within %v of its cancellation", stopTimeout)
		}
		_ = s.Close()
	})
	return r
}

// stop cancels Run and returns its error (nil after a clean drain).
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(stopTimeout):
		t.Fatalf("Run did not return within %v of its cancellation", stopTimeout)
		return nil
	}
}

// seen counts handled messages by id, to find what came twice.
type seen struct {
	mu    sync.Mutex
	count map[string]int
	total int
}

func newSeen() *seen { return &seen{count: map[string]int{}} }

// add records id and reports how many distinct ids were seen so far.
func (s *seen) add(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count[id]++
	s.total++
	return len(s.count)
}

func (s *seen) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.count)
}

// duplicates is the number of handled messages beyond the first of each id.
func (s *seen) duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total - len(s.count)
}

// warnings is a slog handler that keeps every record at WARN or above, as
// one line each.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	w.mu.Lock()
	w.lines = append(w.lines, b.String())
	w.mu.Unlock()
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}
