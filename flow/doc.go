// Package flow holds the two eager stages that do a subscriber's
// bookkeeping on receipt, before a message waits for processing:
//
//   - EagerTrack takes a lease for every message the moment it arrives, so
//     the lease extender covers messages buffered behind a slow stage.
//   - FlowGate takes a flow-control permit (one message, its bytes) from a
//     FlowControl the moment a message arrives, and stops receiving when the
//     budget is spent, so the budget bounds everything the subscriber holds
//     and the backpressure reaches the gRPC stream and the server.
//
// Both are stage.Eager stages: one goroutine, a bounded buffer, hooks run
// on receipt. A permit is returned by the subscriber's one settle path
// (FlowControl.ReleaseMessage, called by sink.Settler), whatever ends the
// message: ack, nack, no-op, lease expiry or shutdown.
package flow
