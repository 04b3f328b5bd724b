package source

import (
	"testing"
	"time"

	gax "github.com/googleapis/gax-go/v2"
)

func TestDelaysBounds(t *testing.T) {
	minD, maxD := 100*time.Millisecond, 2*time.Second
	d := newDelays(gax.Backoff{Initial: minD, Max: maxD})
	var hi time.Duration
	for range 1000 {
		v := d.next()
		if v < minD || v > maxD {
			t.Fatalf("delay %v outside [%v, %v]", v, minD, maxD)
		}
		hi = max(hi, v)
	}
	if hi < maxD/2 {
		t.Fatalf("largest of 1000 delays %v: the sequence does not grow towards %v", hi, maxD)
	}
	d.reset()
	if v := d.next(); v != minD { // first draw is within (0, min], raised to min
		t.Fatalf("first delay after reset = %v, want %v", v, minD)
	}
	if v := newDelays(gax.Backoff{}).next(); v != defaultBackoffMin {
		t.Fatalf("zero backoff: first delay %v, want the default minimum %v", v, defaultBackoffMin)
	}
}

func TestDelaysKeepTheMultiplier(t *testing.T) {
	if m := newDelays(gax.Backoff{Multiplier: 3}).cfg.Multiplier; m != 3 {
		t.Fatalf("Multiplier %v, want the configured 3", m)
	}
	if m := newDelays(gax.Backoff{}).cfg.Multiplier; m != 2 {
		t.Fatalf("Multiplier %v, want the default 2", m)
	}
}
