package publisher

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Hedging defaults and bounds.
const (
	defaultHedgeMaxExtra          = 1  // extra attempts per batch
	defaultHedgeTokens            = 10 // hedges the bucket holds
	defaultHedgeSuccessesPerToken = 10 // successful publishes that earn one hedge
	maxHedgeMaxExtra              = 5
	maxHedgeTokens                = 1000
	maxHedgeSuccessesPerToken     = 1000
)

// HedgingConfig configures hedged publishes: once a batch's Publish has
// been in flight for Delay, a duplicate of it is sent, and another after
// each further Delay, up to MaxExtra extra attempts; the first attempt to
// succeed settles the batch and the others are cancelled. A batch fails
// only when every attempt failed, with the first attempt's error. Batches
// with an ordering key are never hedged (two copies in flight could land
// out of order).
//
// A hedge can publish a batch twice: an attempt that lost may already
// have been stored by the service. Pub/Sub delivers at least once anyway;
// subscribers must tolerate duplicates.
//
// Hedges are rate-limited by a token bucket holding Tokens hedges (full at
// start); each hedge takes one, and every SuccessesPerToken successful
// publishes give one back, so when publishes keep failing hedging stops
// instead of doubling the load. A hedge the bucket refuses is counted in
// Stats.HedgesRefused.
type HedgingConfig struct {
	// Delay is how long an attempt is in flight before the next is sent.
	// Zero (the default) turns hedging off; at most one minute.
	Delay time.Duration
	// MaxExtra bounds the extra attempts of one batch (default 1, at
	// most 5).
	MaxExtra int
	// Tokens is the bucket's size (default 10, at most 1000).
	Tokens int
	// SuccessesPerToken is how many successful publishes refill one token
	// (default 10, at most 1000).
	SuccessesPerToken int
}

func (h HedgingConfig) withDefaults() HedgingConfig {
	h.MaxExtra = cmp.Or(h.MaxExtra, defaultHedgeMaxExtra)
	h.Tokens = cmp.Or(h.Tokens, defaultHedgeTokens)
	h.SuccessesPerToken = cmp.Or(h.SuccessesPerToken, defaultHedgeSuccessesPerToken)
	return h
}

// problems describes each out-of-range field of h, naming it.
func (h HedgingConfig) problems() []string {
	var out []string
	bad := func(v, most int, name string, def int) {
		if v < 0 || v > most {
			out = append(out, fmt.Sprintf("Config.Hedging.%s %d must be within 0–%d (0: %d)", name, v, most, def))
		}
	}
	if h.Delay < 0 || h.Delay > maxDelay {
		out = append(out, fmt.Sprintf("Config.Hedging.Delay %v must be within 0–%v (0: off)", h.Delay, maxDelay))
	}
	bad(h.MaxExtra, maxHedgeMaxExtra, "MaxExtra", defaultHedgeMaxExtra)
	bad(h.Tokens, maxHedgeTokens, "Tokens", defaultHedgeTokens)
	bad(h.SuccessesPerToken, maxHedgeSuccessesPerToken, "SuccessesPerToken", defaultHedgeSuccessesPerToken)
	return out
}

// hedgeBucket is the token bucket, in credits: a hedge costs perToken
// credits and a success earns one, up to tokens×perToken.
type hedgeBucket struct {
	mu       sync.Mutex
	credits  int
	max      int
	perToken int
}

func newHedgeBucket(h HedgingConfig) *hedgeBucket {
	return &hedgeBucket{credits: h.Tokens * h.SuccessesPerToken, max: h.Tokens * h.SuccessesPerToken, perToken: h.SuccessesPerToken}
}

func (b *hedgeBucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.credits < b.perToken {
		return false
	}
	b.credits -= b.perToken
	return true
}

func (b *hedgeBucket) succeeded() {
	b.mu.Lock()
	b.credits = min(b.credits+1, b.max)
	b.mu.Unlock()
}

// attemptResult is what one attempt of a hedged send returned.
type attemptResult struct {
	n   int // 0: the first attempt, 1…: hedges
	ids []string
	err error
}

// sendHedged runs attempt (the retrying send of one batch) and, while no
// attempt has succeeded and one is in flight, starts another after each
// Delay, up to MaxExtra, as the bucket allows. It returns the first
// success, or the first attempt's error once every attempt failed, after
// cancelling the others and waiting for them: no attempt outlives it.
func (p *Publisher) sendHedged(ctx context.Context, span trace.Span, attempt func(ctx context.Context) ([]string, error)) ([]string, error) {
	h := p.cfg.Hedging
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan attemptResult, h.MaxExtra+1) // every attempt sends once, never blocks
	start := func(n int) {
		attemptEvent(span, "publish attempt start", n, nil)
		go func() {
			ids, err := attempt(ctx)
			results <- attemptResult{n: n, ids: ids, err: err}
		}()
	}
	start(0)
	running, extra := 1, 0
	var first *attemptResult
	timer := time.NewTimer(h.Delay)
	defer timer.Stop()
	for running > 0 {
		select {
		case r := <-results:
			running--
			attemptEvent(span, "publish attempt end", r.n, r.err)
			if r.err == nil {
				p.hedges.succeeded()
				if r.n > 0 {
					p.stats.hedgeWins.Add(1)
				}
				cancel()
				p.drainAttempts(span, results, running)
				return r.ids, nil
			}
			if first == nil || r.n < first.n {
				first = &r
			}
		case <-timer.C:
			if extra == h.MaxExtra {
				continue
			}
			extra++
			if !p.hedges.take() {
				p.stats.hedgesRefused.Add(1)
				extra = h.MaxExtra // refused: no more hedges for this batch
				continue
			}
			p.stats.hedged.Add(1)
			start(extra)
			running++
			timer.Reset(h.Delay)
		}
	}
	return nil, first.err
}

// drainAttempts waits for the running cancelled attempts of a hedged send.
func (p *Publisher) drainAttempts(span trace.Span, results <-chan attemptResult, running int) {
	for range running {
		r := <-results
		attemptEvent(span, "publish attempt end", r.n, r.err)
	}
}

// attemptEvent records an attempt's start or end on the batch's publish
// span (nil when the batch is not traced).
func attemptEvent(span trace.Span, name string, n int, err error) {
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("pubsubflow.publish.attempt", n), attribute.Bool("pubsubflow.publish.hedge", n > 0)}
	if err != nil {
		attrs = append(attrs, attribute.String("error", err.Error()))
	}
	span.AddEvent(name, trace.WithAttributes(attrs...))
}
