package stage

import (
	"slices"
	"testing"
)

// drainRing pops every element, oldest first.
func drainRing(r *Ring[int]) []int {
	var got []int
	for r.Len() > 0 {
		if f := r.Front(); f != r.buf[r.head] {
			panic("Front is not the next Pop")
		}
		got = append(got, r.Pop())
	}
	return got
}

func TestRing(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *Ring[int]
		ops  func(r *Ring[int])
		want []int
	}{
		{"zero value grows", &Ring[int]{}, func(r *Ring[int]) {
			for i := range 40 {
				r.Push(i)
			}
		}, ringSeq(0, 40)},
		{"NewRing(0) has room for one", NewRing[int](0), func(r *Ring[int]) { r.Push(7) }, []int{7}},
		{"wraps around before growing", NewRing[int](4), func(r *Ring[int]) {
			r.Push(0)
			r.Push(1)
			r.Pop()
			r.Pop()
			for i := 2; i < 9; i++ { // wraps, then grows with the head mid-slice
				r.Push(i)
			}
		}, ringSeq(2, 9)},
		{"PushFront goes first", NewRing[int](2), func(r *Ring[int]) {
			r.Push(2)
			r.PushFront(1)
			r.PushFront(0) // grows
			r.Push(3)
		}, ringSeq(0, 4)},
		{"PushFront on the zero value", &Ring[int]{}, func(r *Ring[int]) { r.PushFront(5) }, []int{5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ops(tc.r)
			if all := slices.Collect(tc.r.All()); !slices.Equal(all, tc.want) {
				t.Fatalf("All = %v, want %v", all, tc.want)
			}
			if got := drainRing(tc.r); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Pop clears the slot, so the ring does not keep a popped pointer alive.
func TestPopClears(t *testing.T) {
	r := NewRing[*int](2)
	r.Push(new(int))
	r.Pop()
	if r.buf[0] != nil {
		t.Fatal("popped slot still holds the element")
	}
}

// A ring in steady state (never more than its room) does not allocate.
func TestSteadyStateNoAlloc(t *testing.T) {
	r := NewRing[int](8)
	if n := testing.AllocsPerRun(100, func() {
		for i := range 8 {
			r.Push(i)
		}
		for r.Len() > 0 {
			r.Pop()
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run, want 0", n)
	}
}

func ringSeq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}
