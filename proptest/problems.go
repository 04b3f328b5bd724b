package proptest

import (
	"fmt"
	"sync"
)

// The names of what the machine checks. A failure's message is one of
// these, word for word (rapid shrinks a case while it fails the same
// way); the details — message ids, times, counts — are logged with it.
const (
	// The library's invariants (../DESIGN.md numbers them).
	invLeaseLapse      = "invariant 1: a message was redelivered while the client held it (its lease lapsed)"
	invLeases          = "invariant 1: held messages that are not leased"
	invOutstanding     = "invariant 2: flow control does not count exactly what the client holds"
	invOverLimit       = "invariant 2: more outstanding than the budget"
	invSettledTwice    = "invariant 3: an ack id was settled twice"
	invUnsettled       = "invariant 3: after Close a delivery the client received was never settled"
	invShutdownOutcome = "invariant 3: the library settled a message with an outcome that leaves it with the server"
	invBalance         = "invariant 3: after Close received and settled do not balance"
	invLost            = "invariant 3: not every published message was acked after draining"
	invRequest         = "invariant 5: a stream request the service rejects"
	invClientID        = "invariant 6: a stream with another client id"
	invShare           = "invariant 6: a stream asked for more than its share of the budget"
	invCloseSlow       = "invariant 7: Close did not return within its budget"
	invCloseLeak       = "invariant 7: goroutines of the library still running after Close returned"
	invStaleHandOff    = "invariant 8: the topology was handed a copy the server had released"
	invPastDeadline    = "invariant 8: a copy past its deadline was handed on"
	invStaleAck        = "invariant 8: an ack was sent for a copy the server had released"
	invAckExpired      = "invariant 8: a copy past its deadline was acked and counted as acked"
	invAckCount        = "invariant 8: Stats().Acked differs from the acks the server counted"
	invCloseError      = "Close returned an error"
	invLeftRunning     = "goroutines still running after Close and the end of the topology's run"
	propDropped        = "settled: the topology dropped messages without settling them"
	propStopped        = "progress: the topology stopped reading its input"
	propSlow           = "settled: messages handed to the topology were not settled in time"
	propNeverHanded    = "progress: published messages never reached the topology"
	propOrder          = "order: a message was acked before an earlier message of its ordering key"
	propEffect         = "side effect: a message was acked before its side effect was recorded"
	propLatency        = "latency: a message took longer than MaxLatency from publish to ack"
	propRunError       = "the topology's run ended with an error"
	propRunEnded       = "the topology's run ended before it was stopped"
	propHang           = "hang: a wait of the machine did not end"
	maxProblemsKept    = 8
	maxHistoryEntries  = 40
)

// problem is a broken rule found as events happened: what is one of the
// names above, detail the specifics.
type problem struct{ what, detail string }

// problems collects what goroutines of the case found, for the machine's
// next check to report.
type problems struct {
	mu   sync.Mutex
	list []problem
}

func (p *problems) add(what, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) < maxProblemsKept {
		p.list = append(p.list, problem{what, fmt.Sprintf(format, args...)})
	}
}

func (p *problems) first() (problem, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) == 0 {
		return problem{}, false
	}
	return p.list[0], true
}
