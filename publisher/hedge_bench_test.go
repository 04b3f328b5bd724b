package publisher

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// BenchmarkHedgedLatency publishes 20,000 100-byte messages at 10,000 a
// second (so batches fill to about 100 messages within the 10 ms batch
// delay) to a pubsubtest server over loopback TCP that holds back the
// answer of every 100th Publish call (1 %) for 2 s, with hedging off and
// on (Delay 100 ms, the other fields default). It reports the publish
// latency of each message (Publish to its Result settling) at p50, p99
// and p99.9 in ms, and the duplicates the server stored (a stalled call
// stores its messages before it answers, so a won hedge leaves its
// batch's copy behind).
//
//	go test -run '^$' -bench HedgedLatency -benchtime 1x ./publisher/
func BenchmarkHedgedLatency(b *testing.B) {
	for _, mode := range []struct {
		name string
		h    HedgingConfig
	}{{"hedging=off", HedgingConfig{}}, {"hedging=on", HedgingConfig{Delay: 100 * time.Millisecond}}} {
		b.Run(mode.name, func(b *testing.B) {
			var lat []time.Duration
			var dups int64
			var st Stats
			for b.Loop() {
				l, d, s := hedgedLatencyRun(b, mode.h)
				lat, dups, st = append(lat, l...), dups+d, s
			}
			slices.Sort(lat)
			b.ReportMetric(ms(quantile(lat, 0.5)), "p50-ms")
			b.ReportMetric(ms(quantile(lat, 0.99)), "p99-ms")
			b.ReportMetric(ms(quantile(lat, 0.999)), "p99.9-ms")
			b.ReportMetric(float64(dups)/float64(b.N), "duplicates/op")
			b.ReportMetric(float64(st.HedgedAttempts), "hedges")
			b.ReportMetric(float64(st.HedgeWins), "hedge-wins")
			b.ReportMetric(0, "ns/op")
		})
	}
}

const (
	hedgeBenchMessages = 20_000
	hedgeBenchRate     = 10_000 // messages a second
)

// hedgedLatencyRun is one run of BenchmarkHedgedLatency: each message's
// latency, the duplicates stored, and the Publisher's last Stats.
func hedgedLatencyRun(b *testing.B, h HedgingConfig) ([]time.Duration, int64, Stats) {
	srv, topic := benchServer(b)
	ctx := context.Background()
	sub, err := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "bench-sub", Topic: topic})
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(srv.ClientConn(), topic, Config{Hedging: h})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	srv.StallEvery("Publish", 100, 2*time.Second)

	data := make([]byte, 100)
	lat := make([]time.Duration, hedgeBenchMessages)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range hedgeBenchMessages {
		// Open loop: message i goes at start + i/rate, late or not.
		if d := time.Until(start.Add(time.Duration(i) * time.Second / hedgeBenchRate)); d > 0 {
			time.Sleep(d)
		}
		t0 := time.Now()
		r := p.Publish(ctx, &Message{Data: data})
		wg.Go(func() {
			if _, err := r.Get(ctx); err != nil {
				b.Error(err)
			}
			lat[i] = time.Since(t0)
		})
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
	stored := srv.SubscriptionStats(sub).Published
	return lat, stored - hedgeBenchMessages, p.Stats()
}

// quantile is the nearest-rank q-quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
