package ack

import (
	"context"
	"sync"
	"time"
)

// Tag hears the fate of one ack id: AckDone(nil) once the server accepted
// it, AckDone(err) with an *IDError once it failed for good. It is called
// once, on the acknowledger's goroutines, without its lock held, and must
// not block.
type Tag interface {
	AckDone(err error)
}

// Lapser is a Tag that knows its message's server deadline: an ack whose
// Lapsed reports true when its request is about to be sent is left out
// and its Tag hears ErrLapsed, so no ack reaches the server after the
// message may have been given out again.
type Lapser interface {
	Lapsed(now time.Time) bool
}

// Result is a Tag that can be waited on (an exactly-once ack id's fate).
// It settles once.
type Result struct {
	once sync.Once
	done chan struct{}
	err  error
}

// NewResult returns an unsettled Result.
func NewResult() *Result {
	r := new(Result)
	r.Init()
	return r
}

// Init makes a zero Result (one embedded in another type) unsettled.
func (r *Result) Init() { r.done = make(chan struct{}) }

// AckDone settles the result with err (nil: confirmed); only the first
// call counts.
func (r *Result) AckDone(err error) {
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
