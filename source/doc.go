// Package source is the StreamingPull source of a pubsubflow subscriber:
// Subscribe opens N gRPC StreamingPull streams to one subscription and
// merges the messages they receive into one channel of *message.Message.
//
// What it guarantees:
//
//   - The initial request of every stream carries the configured
//     subscription, stream ack deadline, client id, max outstanding
//     messages/bytes (divided among the streams, so the server never sees N
//     times the budget) and protocol_version 1. Every later request is built
//     from the zero value: heartbeats carry nothing initial-only, and at
//     most a new stream_ack_deadline_seconds (SetStreamAckDeadline).
//   - A heartbeat goes out every HeartbeatInterval (30 s); a stream whose
//     server has not answered within HeartbeatTimeout (15 s) after a
//     heartbeat, while the source was waiting to receive, is treated as dead
//     and restarted — once the server has answered a heartbeat on this or an
//     earlier stream of the source. Until then (Google's emulator never
//     answers) a quiet stream is healthy.
//   - Restarts wrap only the gRPC stream: a retryable failure (see
//     DefaultClassifier) reopens the stream after a Backoff delay, with the
//     same client id; nothing downstream is recreated. A terminal failure
//     ends the source with an error that names the subscription and keeps
//     the gRPC status (status.Code works on it).
//   - Recv is called only after every message of the previous response was
//     handed on, over an unbuffered channel, so a stalled consumer stalls the
//     HTTP/2 window and then the server.
//
// The source tracks no leases and no flow permits: the stages after it do,
// on receipt (see the flow package).
package source
