package flow

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// TestGateProperties runs random limits, sizes, processing delays and
// outcomes through one or two gates sharing a budget, with leases expiring
// at random (upstream, while waiting, while buffered, while processing),
// and checks:
//   - Outstanding never exceeds the message limit, and OutstandingBytes the
//     byte limit except for one oversize message alone;
//   - every message is settled exactly once;
//   - when all have settled, Outstanding, bytes and ServerHeld are 0 and
//     permits released equal permits acquired.
func TestGateProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		maxMsgs := rapid.Int64Range(1, 12).Draw(rt, "maxMessages")
		maxBytes := rapid.SampledFrom([]int64{Unlimited, 100, 400, 2000}).Draw(rt, "maxBytes")
		gates := rapid.IntRange(1, 2).Draw(rt, "gates")
		workers := rapid.IntRange(1, 4).Draw(rt, "workers")
		n := rapid.IntRange(1, 60).Draw(rt, "messages")
		type plan struct {
			size    int
			delay   time.Duration
			outcome uint32
			expire  int // 0 never, 1 before the gate, 2 a moment after sending
		}
		plans := make([]plan, n)
		oversize := map[int64]bool{}
		for i := range plans {
			p := plan{
				size:    rapid.IntRange(1, 500).Draw(rt, "size"),
				delay:   time.Duration(rapid.IntRange(0, 200).Draw(rt, "delayµs")) * time.Microsecond,
				outcome: rapid.SampledFrom([]uint32{message.Ack, message.Nack, message.NackAfter, message.NoOp}).Draw(rt, "outcome"),
				expire:  rapid.IntRange(0, 8).Draw(rt, "expire") % 3,
			}
			if rapid.IntRange(0, 9).Draw(rt, "pexpire") < 7 {
				p.expire = 0
			}
			if maxBytes > 0 && int64(p.size) > maxBytes {
				oversize[int64(p.size)] = true
			}
			plans[i] = p
		}

		fc := NewFlowControl(maxMsgs, maxBytes)
		set := newSettles()
		var violation atomic.Value
		check := func(where string) {
			o, b := fc.Outstanding(), fc.OutstandingBytes()
			if o > maxMsgs {
				violation.CompareAndSwap(nil, fmt.Sprintf("%s: Outstanding %d > %d", where, o, maxMsgs))
			}
			if maxBytes > 0 && b > maxBytes && !oversize[b] {
				violation.CompareAndSwap(nil, fmt.Sprintf("%s: OutstandingBytes %d > %d", where, b, maxBytes))
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		g := stage.NewGroup(ctx)
		msgs := make([]*source.Message, n)
		for i := range msgs {
			msgs[i] = set.hold(newMsg(i, plans[i].size))
		}
		var expirers sync.WaitGroup
		var outs []<-chan *source.Message
		for k := range gates {
			in := make(chan *source.Message)
			g.Go(func(ctx context.Context) error {
				defer close(in)
				for i := k; i < n; i += gates {
					m, p := msgs[i], plans[i]
					if p.expire == 1 {
						message.Of(m).Settle(m, message.Expired, 0)
					}
					select {
					case in <- m:
					case <-ctx.Done():
						return ctx.Err()
					}
					check("receive")
					if p.expire == 2 {
						expirers.Add(1)
						go func() { // the lease manager, on its own clock
							defer expirers.Done()
							time.Sleep(p.delay / 2)
							message.Of(m).Settle(m, message.Expired, 0)
						}()
					}
				}
				return nil
			})
			outs = append(outs, FlowGate(fc).Run(g, in))
		}
		index := make(map[*source.Message]int, n)
		for i, m := range msgs {
			index[m] = i
		}
		for _, out := range outs {
			for range workers {
				g.Go(func(ctx context.Context) error {
					for m := range out {
						check("process")
						p := plans[index[m]]
						time.Sleep(p.delay) // simulated processing, not an assertion
						message.Of(m).Settle(m, p.outcome, time.Second)
					}
					return nil
				})
			}
		}
		if err := g.Wait(); err != nil {
			rt.Fatalf("pipeline: %v", err)
		}
		expirers.Wait()

		if v := violation.Load(); v != nil {
			rt.Fatal(v)
		}
		for i, m := range msgs {
			if s, d := set.of(m); s != 1 || d != 1 {
				rt.Fatalf("message %d settled %d times, done %d", i, s, d)
			}
		}
		st := fc.Stats()
		if st.Outstanding != 0 || st.OutstandingBytes != 0 || st.ServerHeld != 0 {
			rt.Fatalf("not back to zero: %+v", st)
		}
		if st.Acquired != st.Released {
			rt.Fatalf("permits acquired %d != released %d", st.Acquired, st.Released)
		}
	})
}
