// Package lease keeps the ack deadlines of received Pub/Sub messages alive
// while they wait in buffers or are being processed.
//
// An Extender is long-lived: the Subscriber owns one (or a caller shares
// one across subscriptions) and it outlives every stream restart. Each
// message is tracked on receipt (Track), which records its lease and queues
// a receipt ModifyAckDeadline that sets the deadline the Strategy yields at
// once; the queue is flushed within a few milliseconds, batched. A
// background loop then extends the leases that would expire before its next
// tick plus a safety margin, with jitter, until the message is settled
// (Release) or has been extended for MaxExtension, after which the lease is
// dropped, the message is settled as message.Expired and the server
// redelivers it.
//
// Extension requests go straight to SubscriberClient.ModifyAckDeadline from
// the extender's own bounded pool of workers; they never share a queue with
// Acknowledge, so a slow ack RPC cannot delay them. Every request is split
// at 1000 ack ids and 512 KiB encoded.
//
// Exactly-once subscriptions: deadlines are at least 60 s, a message is to
// be handed on only once its receipt modack has been confirmed (Confirmed),
// and ack ids the server reports as permanently failed are dropped with an
// event. See Strategy for how the deadline is chosen.
package flow
