package ack

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pubsubflow/pubsubflow/internal/ackids"
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
	// ErrLapsed: the ack id's message had reached (or come within a
	// margin of) its server deadline by the time the ack could be sent, so
	// it was not: the server may have given the message out again (Lapser).
	ErrLapsed = errors.New("ack: the message's lease lapsed before the ack could be sent")
)

// Per-ack-id reasons in the ErrorInfo metadata of exactly-once failures.
const (
	// ReasonInvalidAckID: the ack id expired, was already settled or is
	// malformed; the message will be (or was) redelivered.
	ReasonInvalidAckID = "PERMANENT_FAILURE_INVALID_ACK_ID"
	// TransientPrefix starts every reason that is retried.
	TransientPrefix = ackids.TransientPrefix
)

// IDError is the error a Result settles with, and the Err of an AckFailed
// event, when an ack id failed. errors.Is(err, ErrPermanent /
// ErrRetryExhausted / ErrClosed) tells the kind; status.Code(err) is the
// RPC's status code.
type IDError struct {
	AckID  string // the ack id (the first one, for an event about several)
	Reason string // the server's per-ack-id reason, if it gave one
	Kind   error  // ErrPermanent, ErrRetryExhausted or ErrClosed
	Err    error  // the RPC's error; nil for ErrClosed before any attempt
}

// Error describes the failure: kind, ack id, reason and the RPC's error.
func (e *IDError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	fmt.Fprintf(&b, " for ack id %q", e.AckID)
	if e.Reason != "" {
		b.WriteString(" (" + e.Reason + ")")
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the kind and the RPC's error.
func (e *IDError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// InvalidAckID reports whether the server said the ack id was not live.
func (e *IDError) InvalidAckID() bool { return e.Reason == ReasonInvalidAckID }
