package source

import (
	"testing"
	"time"

	gax "github.com/googleapis/gax-go/v2"
)

// TestDelaysHalfJitter: delay k is within [max(cap/2, Initial), cap], cap
// doubling from Initial up to Max; the first after a reset is Initial;
// the draws do spread over the range.
func TestDelaysHalfJitter(t *testing.T) {
	minD, maxD := 100*time.Millisecond, 2*time.Second
	d := newDelays(gax.Backoff{Initial: minD, Max: maxD})
	c := minD
	var lo, hi time.Duration = maxD, 0
	for k := range 1000 {
		v := d.next()
		if v < max(c/2, minD) || v > c {
			t.Fatalf("delay %d = %v outside [%v, %v]", k, v, max(c/2, minD), c)
		}
		if c == maxD {
			lo, hi = min(lo, v), max(hi, v)
		}
		c = min(2*c, maxD)
	}
	if lo > maxD*6/10 || hi < maxD*9/10 {
		t.Fatalf("delays at the cap span [%v, %v]: no jitter over [%v, %v]", lo, hi, maxD/2, maxD)
	}
	d.reset()
	if v := d.next(); v != minD { // first draw is within [min/2, min], raised to min
		t.Fatalf("first delay after reset = %v, want %v", v, minD)
	}
	if v := newDelays(gax.Backoff{}).next(); v != defaultBackoffMin {
		t.Fatalf("zero backoff: first delay %v, want the default minimum %v", v, defaultBackoffMin)
	}
}

func TestDelaysKeepTheMultiplier(t *testing.T) {
	if m := newDelays(gax.Backoff{Multiplier: 3}).mult; m != 3 {
		t.Fatalf("Multiplier %v, want the configured 3", m)
	}
	if m := newDelays(gax.Backoff{}).mult; m != 2 {
		t.Fatalf("Multiplier %v, want the default 2", m)
	}
	d := newDelays(gax.Backoff{Initial: time.Hour, Max: 1 << 62, Multiplier: 1e6})
	for range 10 { // the cap saturates at Max, never overflows
		if v := d.next(); v < time.Hour {
			t.Fatalf("delay %v below Initial: the cap overflowed", v)
		}
	}
}
