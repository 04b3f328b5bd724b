package message

import "time"

// Clock tells the time, as unix nanoseconds, for the deadline checks on
// the path of every message (before a handler takes it, and when its
// outcome is set): the wall time it was made at plus the monotonic time
// since, which is one clock read where time.Now takes two. A source
// makes one when it is made (inside a test's synctest bubble, too, so
// both readings are the bubble's) and binds it to each message it
// decodes. A wall-clock step moves time.Now but not a Clock; the
// deadlines it is compared with are seconds away and the check keeps a
// margin of SettleMargin, so such a step shifts the check by the step,
// as it always did for a wall-clock check.
type Clock struct {
	base   time.Time
	baseNs int64
}

// NewClock returns a Clock that starts now.
func NewClock() *Clock {
	t := time.Now()
	return &Clock{base: t, baseNs: t.UnixNano()}
}

// Now is the time in unix nanoseconds. A nil Clock reads time.Now.
func (c *Clock) Now() int64 {
	if c == nil {
		return time.Now().UnixNano()
	}
	return c.baseNs + int64(time.Since(c.base))
}
