package source

import (
	"cmp"
	"time"

	gax "github.com/googleapis/gax-go/v2"

	"github.com/pubsubflow/pubsubflow/internal/retry"
)

// Default reconnect delays, as Google's clients: from 100 ms, doubling up
// to 60 s, with full jitter.
const (
	defaultBackoffMin = 100 * time.Millisecond
	defaultBackoffMax = 60 * time.Second
)

// delays is one stream's sequence of reconnect delays: gax-go's backoff
// (internal/retry), each delay raised to at least the initial one so that
// a failing stream is never reopened in a busy loop. Each stream keeps its
// own, reset after a healthy stream.
type delays struct {
	cfg gax.Backoff
	bo  gax.Backoff
}

func newDelays(cfg gax.Backoff) *delays {
	if cfg.Initial <= 0 {
		cfg.Initial = defaultBackoffMin
	}
	if cfg.Max <= 0 {
		cfg.Max = defaultBackoffMax
	}
	mult := cmp.Or(cfg.Multiplier, 2)
	cfg = retry.Backoff(cfg.Initial, cfg.Max)
	cfg.Multiplier = mult
	return &delays{cfg: cfg, bo: cfg}
}

func (d *delays) next() time.Duration { return max(d.bo.Pause(), d.cfg.Initial) }
func (d *delays) reset()              { d.bo = d.cfg }
