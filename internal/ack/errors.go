package ack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Kinds of failure an *IDError unwraps to.
var (
	// ErrPermanent: the server refused the ack id for good (a per-ack-id
	// PERMANENT_* reason, or a status that is not retried).
	ErrPermanent = errors.New("ack: permanent failure")
	// ErrRetryExhausted: transient failures lasted past the retry deadline.
	ErrRetryExhausted = errors.New("ack: retry deadline exceeded")
	// ErrClosed: the acknowledger was closed before the ack id was
	// confirmed (or the ack id was given after Close).
	ErrClosed = errors.New("ack: acknowledger closed")
	// ErrLapsed: the ack id's message had come within a margin of its
	// server deadline by the time the ack could be sent, so it was not:
	// the server may have given the message out again (Lapser).
	ErrLapsed = errors.New("ack: the message's lease lapsed before the ack could be sent")
)

// ReasonInvalidAckID is the per-ack-id reason of an exactly-once failure
// whose ack id expired, was already settled or is malformed: the message
// will be (or was) redelivered.
const ReasonInvalidAckID = "PERMANENT_FAILURE_INVALID_ACK_ID"

// IDError is the error a Tag hears, and the Err of an AckFailed event,
// when an ack id failed. errors.Is(err, ErrPermanent / ErrRetryExhausted /
// ErrClosed) tells the kind; status.Code(err) is the RPC's status code.
type IDError struct {
	AckID  string // the ack id (the first one, for an event about several)
	Reason string // the server's per-ack-id reason, if it gave one
	Kind   error  // ErrPermanent, ErrRetryExhausted, ErrClosed or ErrLapsed
	Err    error  // the RPC's error; nil when there was no attempt
}

// Error describes the failure: kind, ack id, reason and the RPC's error.
func (e *IDError) Error() string {
	s := fmt.Sprintf("%v for ack id %q", e.Kind, e.AckID)
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the kind and the RPC's error (nil entries are skipped by
// errors.Is and errors.As).
func (e *IDError) Unwrap() []error { return []error{e.Kind, e.Err} }

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

// Init makes a zero Result unsettled.
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
