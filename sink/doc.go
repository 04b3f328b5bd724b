// Package sink holds the end of a subscriber pipeline.
//
// Acknowledge is the sink: a message that reaches it without an outcome
// was processed successfully and gets Policy's OnSuccess (ack by default);
// a message already settled (the handler acked or nacked it) is left as it
// is. Handlers report failure by settling the message (Apply, or
// m.Nack()).
//
// The sink sends nothing itself. Every message carries its source's
// settle path: whatever ends it — the sink's policy, a handler's Ack
// anywhere in the pipeline, lease expiry, shutdown — gives back what every
// stage took for it (its lease, its flow permit) and queues the ack or
// nack on the source's acknowledger, which batches them into unary
// Acknowledge and ModifyAckDeadline RPCs with retry. So the sink can never
// be paired wrong, and a pipeline without it still releases everything.
package sink
