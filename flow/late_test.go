package flow

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/operators"
	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}

// warnings returns the Warn records, each as its "stage" attribute.
func (r *records) warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Level != slog.LevelWarn {
			continue
		}
		stage := "?"
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "stage" {
				stage = a.Value.String()
			}
			return true
		})
		out = append(out, stage)
	}
	return out
}

// slowStage passes each message on after d: a stage (with its own
// buffer of one) that a message waits in before it reaches what follows.
func slowStage(d time.Duration) stage.Flow[*source.Message, *source.Message] {
	return operators.ParallelMap(1, func(ctx context.Context, m *source.Message) (*source.Message, error) {
		select {
		case <-time.After(d):
			return m, nil
		case <-ctx.Done():
			return m, ctx.Err()
		}
	}, operators.Options[*source.Message, *source.Message]{Mode: operators.Ordered})
}

// runLate sends n messages received now through a stage taking
// LateAfter/2 per message, then f, then a handler stuck on its first message, for
// 10 virtual seconds; it returns when the pipeline has stopped.
func runLate(t *testing.T, n int, f stage.Flow[*source.Message, *source.Message]) []*source.Message {
	t.Helper()
	msgs := trkMessages(n, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- pipeline.FromContext(ctx, pipeline.Slice(msgs...)).Via(slowStage(LateAfter/2), f, trkBlocked()).To(trkDiscard())
	}()
	time.Sleep(10 * time.Second)
	synctest.Wait()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("pipeline: %v", err)
		}
	})
	return msgs
}

// TestEagerTrackBehindSlowStageWarnsOnce: an EagerTrack placed behind a
// slow stage sees messages arrive long after receipt (LateAfter): it says
// so once, at Warn, and still leases every message it holds — each one
// from the moment it arrives, extended from then on. Placed where messages
// arrive on time, it says nothing.
func TestEagerTrackBehindSlowStageWarnsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stub := &trkStub{}
		ext := trkExtender(t, stub, ExtenderConfig{Strategy: Fixed(time.Second, 3*time.Second)})
		var logs records
		tr := EagerTrack(ext, 0)
		tr.Logger = slog.New(&logs)
		start := time.Now()
		msgs := runLate(t, 6, tr) // they reach it ½ … 3 LateAfter after receipt
		if w := logs.warnings(); !slices.Equal(w, []string{"flow.EagerTrack"}) {
			t.Fatalf("warnings %q, want one from flow.EagerTrack", w)
		}
		if ext.leaseCount() != len(msgs) {
			t.Fatalf("%d leases, want all %d messages (1 in the handler, the rest buffered)", ext.leaseCount(), len(msgs))
		}
		// Every lease is extended after the last message arrived.
		extended := map[string]bool{}
		for _, r := range stub.extensions(start.Add(3*LateAfter + 100*time.Millisecond)) {
			for _, id := range r.ids {
				extended[id] = true
			}
		}
		for _, m := range msgs {
			if !extended[m.AckID] {
				t.Fatalf("message %s not extended after it reached the tracker (extended: %v)", m.AckID, extended)
			}
		}

		var quiet records
		onTime := EagerTrack(ext, 0)
		onTime.Logger = slog.New(&quiet)
		err := pipeline.From(pipeline.Slice(trkMessages(3, nil)...)).Via(onTime).To(trkDiscard())
		if err != nil || len(quiet.warnings()) != 0 {
			t.Fatalf("on time: err %v, warnings %q; want none", err, quiet.warnings())
		}
	})
}

// TestFlowGateBehindSlowStageWarnsOnce: likewise a FlowGate behind a slow
// stage warns once, and still counts every message it holds.
func TestFlowGateBehindSlowStageWarnsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := NewFlowControl(100, Unlimited)
		var logs records
		gate := FlowGate(fc)
		gate.Logger = slog.New(&logs)
		msgs := runLate(t, 6, gate)
		if w := logs.warnings(); !slices.Equal(w, []string{"flow.FlowGate"}) {
			t.Fatalf("warnings %q, want one from flow.FlowGate", w)
		}
		if st := fc.Stats(); st.Outstanding != int64(len(msgs)) || st.Acquired != int64(len(msgs)) {
			t.Fatalf("Stats %+v, want all %d messages counted", st, len(msgs))
		}

		var quiet records
		onTime := FlowGate(fc)
		onTime.Logger = slog.New(&quiet)
		err := pipeline.From(pipeline.Slice(trkMessages(3, nil)...)).Via(onTime).To(pipeline.ForEach(func(_ context.Context, m *source.Message) error {
			m.Ack()
			return nil
		}))
		if err != nil || len(quiet.warnings()) != 0 {
			t.Fatalf("on time: err %v, warnings %q; want none", err, quiet.warnings())
		}
	})
}
