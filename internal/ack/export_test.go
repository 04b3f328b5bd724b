package ack

import "time"

// The single-id calls below are the tests' shorthand for AckTag, NackTag
// and ModackTags, the calls production makes; each returns a Result when
// it is exactly-once.

func newResult() *Result {
	r := new(Result)
	r.Init()
	return r
}

// Ack queues an ack (fire and forget: failures are reported as events).
func (a *Acknowledger) Ack(ackID string) { a.AckTag(ackID, false, nil) }

// AckWithResult queues an exactly-once ack.
func (a *Acknowledger) AckWithResult(ackID string) *Result {
	r := newResult()
	a.AckTag(ackID, true, r)
	return r
}

// Nack queues a nack after delay.
func (a *Acknowledger) Nack(ackID string, delay time.Duration) { a.NackTag(ackID, delay, false, nil) }

// NackWithResult queues an exactly-once nack after delay.
func (a *Acknowledger) NackWithResult(ackID string, delay time.Duration) *Result {
	r := newResult()
	a.NackTag(ackID, delay, true, r)
	return r
}

// Modack queues a deadline modification to seconds from now.
func (a *Acknowledger) Modack(ackID string, seconds int32) {
	a.ModackTags([]string{ackID}, seconds, false, nil)
}

// ModackWithResult queues an exactly-once deadline modification.
func (a *Acknowledger) ModackWithResult(ackID string, seconds int32) *Result {
	r := newResult()
	a.ModackTags([]string{ackID}, seconds, true, []Tag{r})
	return r
}

// Modacks queues one deadline modification for many ack ids.
func (a *Acknowledger) Modacks(ackIDs []string, seconds int32) {
	a.ModackTags(ackIDs, seconds, false, nil)
}

// isIdle reports whether nothing is pending, in flight or retrying.
func (a *Acknowledger) isIdle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending == 0 && len(a.retries) == 0 && a.inflight == [numKinds]int{}
}
