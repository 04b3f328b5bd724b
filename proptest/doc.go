// Package proptest checks a topology — your stages between a
// subscription's source and its acks — against pubsubflow's invariants
// and the properties you declare, with a rapid state machine in virtual
// time. Call it from your own tests:
//
//	func TestTopology(t *testing.T) {
//		proptest.CheckTopology(t, func(ctx context.Context, env *proptest.Env) error {
//			return env.From(ctx).Via(myStages()).To(env.Acknowledge())
//		}, proptest.Options{Ordered: true, MaxLatency: time.Minute})
//	}
//
// Each case runs the topology on a consumer — a Subscriber, or the same
// chain built from the public operators (source.Subscribe →
// flow.EagerTrack → flow.FlowGate, fused) — against a pubsubtest server
// over bufconn inside a testing/synctest bubble, and drives it with random
// actions: publishes, stalls of the topology's input, failing and slow
// acks and modacks, acks and modacks failing with an AIP-193 ErrorInfo
// that carries no per-id reasons (RESOURCE_EXHAUSTED or UNAVAILABLE,
// retried; PERMISSION_DENIED, refused for good: not acked, no lease
// confirmed, redelivered), lease extensions failing for a while, streams killed
// or stalled, time passing, the topology's pipeline stopped and started
// again; then, in most cases, a quiet phase; then Close, and a drain of
// the subscription. After every action the machine checks a model of the
// wire (every delivery, modack, ack and nack the client sent or received)
// and the consumer's own counters, exactly:
//
//  1. Every message the client holds is leased from the moment it is
//     received: no lease lapses at the server while the message waits in a
//     buffer or a handler, and every held message has a lease.
//  2. Flow control counts exactly the messages the client holds — no
//     tolerance — and stays within its limits.
//  3. Every message received is settled exactly once (acked, nacked or
//     expired); after Close nothing is left held, leased or counted, and a
//     drain of the subscription finds every published message.
//  4. Buffers are bounded: the client holds no more than its budget.
//  5. Stream requests are valid: initial-only fields only on a stream's
//     first request.
//  6. Reconnects lose nothing: every stream keeps the client id and its
//     share of the budget, and leases outlive a stream restart.
//  7. Close returns within its budget (the drain timeout) and leaves no
//     goroutine of the library behind; once the topology's run has ended,
//     none of its goroutines is left either.
//  8. The client's view of a lease is the server's: the topology is never
//     handed a copy the server has released or given out again, and an
//     ack of such a copy is never counted as an ack (Stats' acks equal the
//     server's).
//
// And what the topology itself must do:
//
//   - settle every message it was handed: in the quiet phase, a message
//     it holds unsettled while it waits for more input was dropped (a
//     filter that neither acks nor nacks); one it cannot take because a
//     stage stopped reading (a branch that never drains) stops
//     everything;
//   - with Options.Ordered, ack the messages of an ordering key in the
//     order it received them;
//   - with Options.SideEffect, ack a message only once its side effect is
//     recorded;
//   - with Options.MaxLatency, ack within that time of the publish.
//
// A failure names the invariant or property broken, and rapid prints the
// smallest case it found: the consumer's configuration, the actions, and
// the message ids involved.
//
// The number of cases is Options.Checks (DefaultChecks, sized to run in
// well under 30 s with -race on two cores); ChecksEnv
// (PUBSUBFLOW_RAPID_CHECKS=N) or an explicit -rapid.checks=N raises it
// for a long run, and -rapid.steps=N lengthens each case's sequence of
// actions. Cases rapid found failing are saved under testdata/rapid and
// replayed first on the next run.
//
// This package's own tests run the same machine on the library's
// topologies (a Subscriber's Process and Run, and the hand-built chain),
// with the chain in each shape of DESIGN.md's composition rules that it
// draws (chainShapes: one source; two fused gates, each budget checked
// exactly; two sources on two connections sharing one Extender and one
// FlowControl; a KeyedFlowGate fused after the source), replay the faults
// it found as regression tests, and check single stages
// (stage.Eager, FlowGate, the lease extender, the acknowledger) with
// cheaper unit properties.
package proptest
