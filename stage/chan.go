package stage

import "context"

// Recv receives from in unless ctx is done first. ok is false when in is
// closed or ctx is done: either way the caller stops.
func Recv[T any](ctx context.Context, in <-chan T) (v T, ok bool) {
	select {
	case v, ok = <-in:
		return v, ok
	case <-ctx.Done():
		return v, false
	}
}

// Send sends v on out unless ctx is done first, and reports whether it was
// sent.
func Send[T any](ctx context.Context, out chan<- T, v T) bool {
	select {
	case out <- v:
		return true
	case <-ctx.Done():
		return false
	}
}
