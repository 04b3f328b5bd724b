package source

import (
	"cmp"
	"math/rand/v2"
	"time"

	gax "github.com/googleapis/gax-go/v2"
)

// Default reconnect delays: from 100 ms, doubling up to 60 s.
const (
	defaultBackoffMin = 100 * time.Millisecond
	defaultBackoffMax = 60 * time.Second
)

// delays is one stream's reconnect delays, with half jitter (see
// Config.Backoff): gax-go's full jitter would let a stream that fails
// again and again reopen every Initial; half jitter keeps the delays
// growing and still spreads clients retrying together.
type delays struct {
	initial, most time.Duration
	mult          float64
	cap           time.Duration // cap of the next delay
}

func newDelays(cfg gax.Backoff) *delays {
	initial := cmp.Or(max(cfg.Initial, 0), defaultBackoffMin)
	most := max(cmp.Or(max(cfg.Max, 0), defaultBackoffMax), initial)
	return &delays{initial: initial, most: most, mult: max(cmp.Or(cfg.Multiplier, 2), 1), cap: initial}
}

func (d *delays) next() time.Duration {
	c := d.cap
	if f := float64(c) * d.mult; f < float64(d.most) {
		d.cap = time.Duration(f)
	} else {
		d.cap = d.most // also where the product would overflow
	}
	return max(c/2+rand.N(c-c/2+1), d.initial)
}

func (d *delays) reset() { d.cap = d.initial }
