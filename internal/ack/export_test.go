package ack

import "time"

// The single-id calls below are the tests' shorthand for AckTag, NackTag
// and ModackTags, the calls production makes; each returns a Result when
// it is exactly-once.

// Ack queues an ack (fire and forget: failures are reported as events).
func (a *Acknowledger) Ack(ackID string) *Result {
	return a.enqueue(batchKey{kind: kindAck}, ackID)
}

// AckWithResult queues an exactly-once ack: the Result settles with nil
// when the server confirmed it, or with an *IDError.
func (a *Acknowledger) AckWithResult(ackID string) *Result {
	return a.enqueue(batchKey{kind: kindAck, eo: true}, ackID)
}

// Nack queues a nack: redelivery after delay (a ModifyAckDeadline of delay
// rounded up to whole seconds, at most 600 s; 0 means now).
func (a *Acknowledger) Nack(ackID string, delay time.Duration) *Result {
	return a.enqueue(batchKey{kind: kindModack, seconds: DelaySeconds(delay), nack: true}, ackID)
}

// NackWithResult is Nack with exactly-once handling (see AckWithResult).
func (a *Acknowledger) NackWithResult(ackID string, delay time.Duration) *Result {
	return a.enqueue(batchKey{kind: kindModack, seconds: DelaySeconds(delay), nack: true, eo: true}, ackID)
}

// Modack queues a deadline modification to seconds from now (clamped to
// 0–600; 0 is a nack).
func (a *Acknowledger) Modack(ackID string, seconds int32) *Result {
	return a.enqueue(batchKey{kind: kindModack, seconds: clampSeconds(seconds)}, ackID)
}

// ModackWithResult is Modack with exactly-once handling (see
// AckWithResult): its Result settles when the server confirmed the
// deadline.
func (a *Acknowledger) ModackWithResult(ackID string, seconds int32) *Result {
	return a.enqueue(batchKey{kind: kindModack, seconds: clampSeconds(seconds), eo: true}, ackID)
}

// Modacks queues one deadline modification for many ack ids (lease
// extension), without results and without exactly-once handling.
func (a *Acknowledger) Modacks(ackIDs []string, seconds int32) {
	a.ModackTags(ackIDs, seconds, false, nil)
}

// enqueue queues ackID under key, with a Result when key is exactly-once.
func (a *Acknowledger) enqueue(key batchKey, ackID string) *Result {
	var r *Result
	if key.eo {
		r = NewResult()
		a.enqueueTag(key, ackID, r)
	} else {
		a.enqueueTag(key, ackID, nil)
	}
	return r
}
