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
// server only for the room left. That is how a Subscriber composes them,
// and how a hand-built chain should (see the Gate.Receive example). As a
// standalone stage (EagerTrack, FlowGate: stage.Eager, one goroutine, a
// bounded buffer) they serve chains that start from another source.
//
// A permit is returned by the subscriber's one settle path
// (FlowControl.ReleaseMessage, called by sink.Settler), whatever ends the
// message: ack, nack, no-op, lease expiry or shutdown.
package flow
