package source

import (
	"testing"
	"time"
)

func next(t *testing.T, d Delays) time.Duration {
	t.Helper()
	v, ok := d.Next()
	if !ok {
		t.Fatal("Next stopped")
	}
	return v
}

func TestExponential(t *testing.T) {
	d := Exponential(100*time.Millisecond, time.Second).Start()
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := next(t, d); got != w*time.Millisecond {
			t.Fatalf("delay %d = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	d.Reset()
	if got := next(t, d); got != 100*time.Millisecond {
		t.Fatalf("after Reset: %v, want 100ms", got)
	}
}

func TestRandomizedExponentialBounds(t *testing.T) {
	minD, maxD := 100*time.Millisecond, 2*time.Second
	d := RandomizedExponential(minD, maxD).Start()
	var hi time.Duration
	for range 1000 {
		v := next(t, d)
		if v < minD || v > maxD {
			t.Fatalf("delay %v outside [%v, %v]", v, minD, maxD)
		}
		hi = max(hi, v)
	}
	if hi < maxD/2 {
		t.Fatalf("largest of 1000 delays %v: the sequence does not grow towards %v", hi, maxD)
	}
	d.Reset()
	if v := next(t, d); v != minD { // first draw is within (0, min], raised to min
		t.Fatalf("first delay after Reset = %v, want %v", v, minD)
	}
	// Independent sequences per Start.
	a, b := RandomizedExponential(0, 0).Start(), RandomizedExponential(0, 0).Start()
	if next(t, a) != DefaultBackoffMin || next(t, b) != DefaultBackoffMin {
		t.Fatal("zero bounds: want the default minimum")
	}
}

func TestRandomAndStop(t *testing.T) {
	d := Random(time.Second, 2*time.Second).Start()
	for range 100 {
		if v := next(t, d); v < time.Second || v > 2*time.Second {
			t.Fatalf("delay %v outside [1s, 2s]", v)
		}
	}
	if _, ok := Stop().Start().Next(); ok {
		t.Fatal("Stop retried")
	}
}
