// Package proptest holds the rapid property and state-machine tests of
// seven invariants of the Subscriber. The tests and their failure messages
// refer to them by these numbers:
//
//  1. Every message the client holds is leased from the moment it is
//     received, so no lease lapses at the server while the message waits in
//     a buffer or a handler.
//  2. Flow control counts exactly the messages the client holds, and stays
//     within MaxOutstandingMessages and MaxOutstandingBytes.
//  3. Every message received is settled exactly once (acked, nacked or
//     expired), and after Close nothing is left leased or counted.
//  4. Buffers are bounded: the client holds no more messages than its
//     flow-control budget.
//  5. Stream requests are valid: the fields the service accepts only on a
//     stream's first request appear only there.
//  6. Reconnects lose nothing: every stream keeps the subscriber's client
//     id and its share of the budget, and leases outlive a stream restart.
//  7. Close returns within its budget and leaves no goroutine of the
//     subscriber behind.
//
// The package has no API: everything is in its tests.
//
//   - TestSubscriberMachine drives a real Subscriber against a pubsubtest
//     server over bufconn, inside a testing/synctest bubble (virtual time),
//     with random actions — publish batches of random sizes and payload
//     lengths, stall and release the handler, fail or delay Acknowledge and
//     ModifyAckDeadline, kill or stall the streams, let time pass, stop the
//     run and start the next one with another parallelism, close — and
//     checks the invariants after every step against a model: the ledger,
//     a wrapped SubscriberClient that sees every delivery, modack, ack and
//     nack on the client's side of the wire, plus Subscriber.Stats and the
//     server's counters.
//   - Cheaper unit-level properties cover one stage each: the eager stage
//     (stage.Eager), FlowControl and FlowGate, the lease extender's batching
//     and timing, and the acknowledger's request splitting.
//
// Case counts: each property has a CI default small enough that the whole
// package runs in well under 90 s with -race on two cores. Long runs raise
// it for every property at once with -rapid.checks=N, or with the
// PUBSUBFLOW_RAPID_CHECKS (or rapid's own RAPID_CHECKS) environment
// variable; -rapid.steps=N (RAPID_STEPS) lengthens the state machine's
// action sequences. Minimised failing cases that rapid wrote to
// testdata/rapid/ are replayed first on every run, as regression tests.
package proptest
