package source

import (
	"testing"

	"pgregory.net/rapid"
)

// TestHashSetModel: random adds and removes of few distinct keys (so
// collisions of probe runs and deletions inside them are common) agree
// with a map after every step.
func TestHashSetModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var s hashSet
		model := map[uint64]bool{}
		// Keys share their probe bits often: a few homes, many keys each.
		key := rapid.Custom(func(t *rapid.T) uint64 {
			home := rapid.Uint64Range(0, 7).Draw(t, "home")
			low := rapid.Uint64Range(1, 255).Draw(t, "low")
			return home<<8 | low
		})
		for range rapid.IntRange(1, 400).Draw(rt, "steps") {
			k := key.Draw(rt, "k")
			if rapid.Bool().Draw(rt, "add") {
				if got := s.add(k); got == model[k] {
					rt.Fatalf("add(%x) = %v with it held: %v", k, got, model[k])
				}
				model[k] = true
			} else {
				s.remove(k)
				delete(model, k)
			}
			if s.n != len(model) {
				rt.Fatalf("n = %d, model %d", s.n, len(model))
			}
			for m := range model {
				if s.add(m) {
					rt.Fatalf("%x held but not found", m)
				}
			}
		}
	})
}
