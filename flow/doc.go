// Package flow holds the two pieces of a subscriber's bookkeeping on
// receipt, before a message waits anywhere for processing:
//
//   - EagerTrack takes a lease for every message the moment it arrives, so
//     the lease extender covers messages buffered behind a slow stage.
//   - FlowGate counts every message (one message, its bytes) against a
//     FlowControl budget the moment it arrives, so Outstanding is exactly
//     what the client holds, and receiving stops while the budget is spent,
//     so the backpressure reaches the gRPC stream and the server.
//
// Each is one implementation used two ways. As a receipt step
// (Tracker.Receive, Gate.Receive) a source runs it where it decodes a
// StreamingPull response (source.Config.Receipt), and the Gate is then also
// the source's Budget: streams read only while there is room and ask the
// server only for the room left. That is how a Subscriber composes them.
// As a standalone stage (EagerTrack, FlowGate: stage.Eager, one goroutine,
// a bounded buffer) they serve chains that start from another source (the
// tests, and the property tests' models).
//
// A permit is returned by the subscriber's one settle path
// (FlowControl.ReleaseMessage, called by sink.Settler), whatever ends the
// message: ack, nack, no-op, lease expiry or shutdown. FlowControl's
// counting (TryAcquire, ReleaseN) also bounds the Publisher's outstanding
// messages.
//
// The package is internal: the Subscriber composes it so that a lease or
// a permit can never be taken downstream of a buffer.
package flow
