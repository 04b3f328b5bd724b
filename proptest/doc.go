// Package proptest holds the rapid property and state-machine tests of the
// seven invariants in pubsubflow's design guide (DESIGN.md, "Invariants"):
// tracking on receipt, flow control that counts every held message, settle
// exactly once, bounded buffers, initial-only request fields, reconnects
// that lose nothing, and a Close that leaves no goroutine behind.
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
