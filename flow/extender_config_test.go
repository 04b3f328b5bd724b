package flow

import (
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pubsubflow/pubsubflow/source"
)

// p99 is the nearest-rank 99th percentile of latencies rounded up to
// whole seconds: the reference the histogram must agree with.
func p99(lat []time.Duration) time.Duration {
	s := make([]time.Duration, len(lat))
	for i, d := range lat {
		s[i] = ceilSeconds(d)
	}
	slices.Sort(s)
	rank := (99*len(s) + 99) / 100 // ceil(0.99 n)
	return s[rank-1]
}

func TestPercentileMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + r.IntN(3000)
		lat := make([]time.Duration, n)
		p := newPolicy(Adaptive(AdaptiveConfig{Min: time.Second}), time.Minute)
		for i := range lat {
			lat[i] = time.Duration(r.Int64N(int64(590 * time.Second)))
			p.record(lat[i])
		}
		if got, want := time.Duration(p.percentile(0.99))*time.Second, p99(lat); got != want {
			t.Fatalf("trial %d (n=%d): percentile %v, sort says %v", trial, n, got, want)
		}
	}
}

// TestAdaptiveConvergesAndClamps runs in virtual time: messages are acked
// at chosen receipt→ack latencies, and the deadline the extender requests
// becomes their 99th percentile, within the bounds.
func TestAdaptiveConvergesAndClamps(t *testing.T) {
	cases := []struct {
		name    string
		bounds  AdaptiveConfig
		stream  time.Duration
		initial time.Duration
		latency func(i int) time.Duration
		n       int
		want    time.Duration
	}{
		{"p99 of 1..200s", AdaptiveConfig{}, 30 * time.Second, 30 * time.Second,
			func(i int) time.Duration { return time.Duration(i+1) * time.Second }, 200, 198 * time.Second},
		{"sub-second latencies clamp to Min", AdaptiveConfig{}, 60 * time.Second, 60 * time.Second,
			func(i int) time.Duration { return 300 * time.Millisecond }, 50, 10 * time.Second},
		{"long latencies clamp to Max", AdaptiveConfig{}, 5 * time.Second, 10 * time.Second,
			func(i int) time.Duration { return 700 * time.Second }, 20, 600 * time.Second},
		{"custom bounds, low", AdaptiveConfig{Min: 20 * time.Second, Max: 120 * time.Second}, 10 * time.Second, 20 * time.Second,
			func(i int) time.Duration { return time.Second }, 10, 20 * time.Second},
		{"custom bounds, high", AdaptiveConfig{Min: 20 * time.Second, Max: 120 * time.Second}, 300 * time.Second, 120 * time.Second,
			func(i int) time.Duration { return 500 * time.Second }, 10, 120 * time.Second},
		{"one outlier in 1000 is above p99", AdaptiveConfig{}, 60 * time.Second, 60 * time.Second,
			func(i int) time.Duration {
				if i == 0 {
					return 500 * time.Second
				}
				return 42 * time.Second
			}, 1000, 42 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cap := &capture{}
				e := newExt(t, cap, ExtenderConfig{
					Strategy: Adaptive(c.bounds), StreamAckDeadline: c.stream, MaxExtension: -1,
				})
				if got := e.currentDeadline(); got != c.initial {
					t.Fatalf("initial Deadline %v, want %v", got, c.initial)
				}
				msgs := handMade(testSub, c.n, 5, false)
				type ack struct {
					m   *source.Message
					lat time.Duration
				}
				acks := make([]ack, c.n)
				lat := make([]time.Duration, c.n)
				for i, m := range msgs {
					e.track(one(m))
					acks[i] = ack{m, c.latency(i)}
					lat[i] = acks[i].lat
				}
				slices.SortFunc(acks, func(a, b ack) int { return int(a.lat - b.lat) })
				start := time.Now()
				for _, a := range acks {
					time.Sleep(time.Until(start.Add(a.lat)))
					a.m.Ack() // no settle path: final at once
				}
				if got := e.currentDeadline(); got != c.want {
					t.Fatalf("Deadline %v, want %v (p99 of the latencies %v)", got, c.want, p99(lat))
				}
				// New leases get the converged deadline.
				e.track(handMade(testSub, 1, 9, false))
				time.Sleep(10 * time.Millisecond)
				reqs := cap.requests()
				if last := reqs[len(reqs)-1]; time.Duration(last.secs)*time.Second != c.want {
					t.Fatalf("receipt modack after convergence asked %ds, want %v", last.secs, c.want)
				}
			})
		})
	}
}

// TestNackDoesNotTeachAdaptive: only acks are latency samples.
func TestNackDoesNotTeachAdaptive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newExt(t, &capture{}, ExtenderConfig{StreamAckDeadline: 45 * time.Second})
		for _, m := range handMade(testSub, 5, 1, false) {
			e.track(one(m))
			m.Nack()
		}
		if e.leaseCount() != 0 {
			t.Fatalf("Len %d after nacks, want 0", e.leaseCount())
		}
		if got := e.currentDeadline(); got != 45*time.Second {
			t.Fatalf("Deadline %v after nacks, want the initial 45s", got)
		}
	})
}
