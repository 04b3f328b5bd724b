// Package flow holds the bookkeeping a subscriber does for every message
// the moment it is received, before it waits anywhere for processing:
//
//   - EagerTrack leases every message with an Extender, which may be shared
//     by any number of sources and extends each message on its own
//     subscription.
//   - FlowGate counts every message against a FlowControl budget, so
//     Outstanding is exactly what the client holds, and stops receiving
//     while the budget is spent.
//   - KeyedFlowGate shares a budget fairly among keys (tenants).
//
// Written right after source.Subscribe —
//
//	pipeline.From(src).Via(flow.EagerTrack(ext, 0), flow.FlowGate(fc), …)
//
// — they are fused into the source (each is a source.Step): they run where
// each response is decoded, a gate's budget decides when the streams read
// and what they ask the server for, and the tracker's deadline becomes the
// streams' ack deadline. Anywhere else they run as eager stages that still
// lease and count on their own receipt, and warn once when messages reach
// them late (a buffer sits before them).
//
// Nothing taken here needs a paired release: a lease and a permit are
// given back by the message's one settle path, whatever ends it. A lease
// whose deadline passes unextended is expired at once, so a handler never
// gets a message the server may have given out again.
package flow
