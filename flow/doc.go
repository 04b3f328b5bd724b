// Package flow holds the bookkeeping a subscriber does for every message
// the moment it is received, before it waits anywhere for processing:
//
//   - EagerTrack takes a lease with an Extender for every message as it
//     arrives, so lease extension covers messages buffered behind a slow
//     stage. The Extender is long-lived and may be shared by any number of
//     sources, subscriptions and Subscribers: it extends each message on the
//     subscription the message names, so it cannot extend the wrong one.
//   - FlowGate counts every message (one message, its bytes) against a
//     FlowControl budget as it arrives, so Outstanding is exactly what the
//     client holds, and receiving stops while the budget is spent, so the
//     backpressure reaches the gRPC stream and the server.
//   - KeyedFlowGate shares a budget fairly among keys (tenants), as an
//     application-level budget among consumers of one subscription.
//
// EagerTrack, FlowGate and KeyedFlowGate are each one implementation used
// two ways.
// Written right after source.Subscribe in a pipeline —
//
//	pipeline.From(src).Via(flow.EagerTrack(ext, 0), flow.FlowGate(fc), …)
//
// — they are fused into the source (they are each a source.Step): they run where
// each StreamingPull response is decoded, the gate is also the streams'
// Budget (they read only while every fused gate has room, and each stream
// asks the server only for the least room left), and the tracker's deadline becomes the
// streams' ack deadline. The keyed gate is a FlowGate whose source hands
// its messages to it at once (its Sequence hook): it hands them on by the
// keys' shares, so it is fair among everything the client holds. Anywhere else they run as eager stages (one
// goroutine, a bounded buffer) that still lease and count on their own
// receipt, and say once, at Warn, when messages reach them long after the
// source received them (a buffer sits before them).
//
// Nothing taken here needs a paired release: a lease and a permit are the
// message's holds, given back by its one settle path whatever ends it —
// an ack or nack anywhere in the pipeline, the sink's policy, expiry,
// shutdown. A lease whose deadline passes without a confirmed extension
// (failing modacks, a stalled or paused process) is expired at once, so a
// handler never gets a message the server may have given out again.
package flow
