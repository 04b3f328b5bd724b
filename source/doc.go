// Package source is the StreamingPull source of pubsubflow: Subscribe
// opens N gRPC StreamingPull streams to one subscription (per run) and
// merges the messages they receive into one channel of *Message. It
// declares Message, the element of every subscriber stage, and owns each
// message's one settle path: whatever ends a message — Ack or Nack
// anywhere in a pipeline, expiry, Close — gives back what every stage
// took for it and queues its ack or nack on the source's acknowledger
// (unary RPCs, batched: sent at once when none is in flight, else
// coalesced behind the one that is; retried with backoff).
//
// What it guarantees:
//
//   - The initial request of every stream carries the configured
//     subscription, stream ack deadline, client id, max outstanding
//     messages/bytes (divided among the streams, so the server never sees N
//     times the budget) and protocol_version 1. Every later request is built
//     from the zero value: heartbeats carry nothing initial-only, and at
//     most a new stream_ack_deadline_seconds (when a fused step's
//     AckDeadline changes, e.g. flow.EagerTrack's adaptive lease).
//   - A heartbeat goes out every HeartbeatInterval (30 s); a stream whose
//     server has not answered within HeartbeatTimeout (15 s) after a
//     heartbeat, while the source was waiting to receive, is treated as dead
//     and restarted — once the server has answered a heartbeat on this or an
//     earlier stream of the source. Until then (Google's emulator never
//     answers) a quiet stream is healthy.
//   - Restarts wrap only the gRPC stream, inside the source: a retryable
//     failure (see DefaultClassifier) reopens the stream after a Backoff
//     delay, with the same client id; nothing downstream is recreated, and
//     there is no restart wrapper for a stage to be put inside. A terminal
//     failure ends the source with an error that names the subscription and
//     keeps the gRPC status (status.Code works on it); a run of failures
//     longer than ReconnectTimeout ends it with an *UnreachableError. Only
//     a healthy stream (it delivered a message, or stayed open 10 s) resets
//     the backoff and ends a run of failures: empty responses do not.
//   - The receipt steps (Steps: flow.EagerTrack, flow.FlowGate, fused with
//     With or by Pipeline.Via) run on each response's messages on the
//     stream's goroutine, right after it is decoded and before any of them
//     waits anywhere; each declares its hooks (a Receipt), which only
//     the source calls. A step with a Sequence hook, fused by
//     Pipeline.Via (flow.KeyedFlowGate), also chooses the order its output
//     is handed on in. Malformed elements (an empty or repeated ack id, an
//     ack id without a message) are refused before that, counted in Stats.
//   - Every message carries its server deadline (receipt plus the stream
//     ack deadline, then each confirmed extension); a message past it (or
//     within a second of it) is expired, never handed on, and an ack of it
//     does not count.
//   - With Budgets, a stream reads the next response only while every
//     budget has room, opens only once each grants limits, and asks the
//     server on its initial request for the least of them: the room left,
//     not a fresh budget per reconnect. A budget shared with other
//     streams may revoke a stream's grant so that it can be shared: the
//     stream half-closes, reads what the server still sends, and opens
//     again with its new grant. Without one, it reads the next response
//     only once the previous ones were handed on. Either way a stalled
//     consumer stalls the HTTP/2 window and then the server; the watchdog
//     does not count the time a stream is deliberately not reading.
//   - Messages go to the consumer in batches (RunBatches: a response's
//     worth, or all that arrived since the last hand-off), one channel
//     operation per batch; Run hands them on one at a time.
//
// The source knows nothing of leases or permits: it runs the steps and
// asks the budget it is given (see the flow package). A run that ends
// nacks what it received and did not hand on, and what its pipeline was
// handed and left unsettled; Stop ends every run gracefully, within
// Config.DrainTimeout (a run still going then is abandoned: its pipeline
// cancelled, what it left nacked), and Close nacks whatever is still
// unsettled and flushes the acks.
package source
