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
// (through its hold) or has been extended for MaxExtension, after which the lease is
// dropped, the message is settled as message.Expired and the server
// redelivers it.
//
// Modacks go out through the library's one sender of acks and deadline
// modifications (internal/ack: sent at once when none is in flight, else
// coalesced; split at 1000 ack ids and 512 KiB; transient failures retried
// with backoff), one instance per subscription that serves nothing but
// this extender, so a slow ack RPC of a source never delays an extension.
// A lease whose deadline passes without a confirmed extension is dropped
// at once, and a modack that succeeds after that does not revive it.
//
// Exactly-once subscriptions: deadlines are at least 60 s, a message is to
// be handed on only once its receipt modack has been confirmed (Confirmed),
// and ack ids the server reports as permanently failed are dropped with an
// event. See Strategy for how the deadline is chosen.
package flow
