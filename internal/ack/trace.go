package ack

// Tracer traces the acknowledger's RPCs (the subscriber's OpenTelemetry
// tracing implements it). Nil, the default, costs one nil check per RPC
// attempt and nothing per ack id.
type Tracer interface {
	// StartRPC is called before each attempt of an RPC: op is "ack" for
	// Acknowledge, "nack" for a ModifyAckDeadline that nacks and "modack"
	// for one that extends; seconds is the deadline it sets. The returned
	// function is called once with the attempt's outcome. ackIDs and tags
	// (parallel, entries may be nil) must not
	// be kept or modified.
	StartRPC(op string, seconds int32, ackIDs []string, tags []Tag) func(Attempt)
}

// Attempt is the outcome of one RPC attempt, by index into its ack ids.
// The ids in neither Failed nor Retry were confirmed by the server.
type Attempt struct {
	// Err is the RPC's error (nil: every ack id was confirmed).
	Err error
	// Failed are the indexes that failed for good (their retry deadline
	// passed, the server refused them, or the acknowledger was closing).
	Failed []int
	// Retry are the indexes that will be sent again after a backoff.
	Retry []int
}

// op names a request's RPC as the official clients name its span.
func (k batchKey) op() string {
	switch {
	case k.kind == kindAck:
		return "ack"
	case k.nack:
		return "nack"
	default:
		return "modack"
	}
}

// traceAttempt builds what Config.Tracer is told about an attempt.
// exhausted: the retries ran out, so the ids to retry failed for good.
func traceAttempt(n int, err error, aborted, exhausted bool, o outcome) Attempt {
	if err == nil {
		return Attempt{}
	}
	if aborted {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return Attempt{Err: err, Failed: all}
	}
	at := Attempt{Err: err, Failed: o.failed, Retry: o.retry}
	if exhausted {
		at.Failed = append(append([]int(nil), o.failed...), o.retry...)
		at.Retry = nil
	}
	return at
}
