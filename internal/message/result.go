package message

import (
	"context"
	"sync"
)

// Result is the outcome of an ack or nack that the server confirms
// (exactly-once delivery). It settles once.
type Result struct {
	once sync.Once
	done chan struct{}
	err  error
}

// NewResult returns an unsettled Result.
func NewResult() *Result { return &Result{done: make(chan struct{})} }

// Resolve settles the result with err (nil: confirmed). Only the first
// call counts.
func Resolve(r *Result, err error) {
	r.once.Do(func() {
		r.err = err
		close(r.done)
	})
}

// Done is closed when the result has settled.
func (r *Result) Done() <-chan struct{} { return r.done }

// Wait blocks until the result settles or ctx is done.
func (r *Result) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
