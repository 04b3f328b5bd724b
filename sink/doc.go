// Package sink holds a subscriber's terminal stages and its settle path.
//
// Settler is the one settle path every message is bound to on receipt
// (message.Message.Bind): whatever ends a message — the handler's ack or
// nack, the Acknowledge sink's policy, lease expiry, shutdown — it
// releases the message's flow permits, releases its lease (which records
// the processing latency for the adaptive deadline) and hands the ack or
// nack to the shared ack.Acknowledger, exactly once. A caller cannot forget
// to pair them: there is nothing to pair.
//
// Acknowledge is the sink at the end of a pipeline: a message that reaches
// it without an outcome was processed successfully and gets Policy's
// OnSuccess (ack by default). Handlers report failure by settling the
// message (Apply, or m.Nack()).
package sink
