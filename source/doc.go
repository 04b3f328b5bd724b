// Package source is the StreamingPull source of pubsubflow: Subscribe
// opens N gRPC StreamingPull streams to one subscription (per run) and
// merges the messages they receive into one channel of *Message. It
// declares Message and owns each message's one settle path: whatever ends
// a message (Ack or Nack anywhere, expiry, Close) gives back what every
// stage took for it and queues its ack or nack on the source's
// acknowledger.
//
// What it guarantees:
//
//   - The initial request of every stream carries the subscription, stream
//     ack deadline, client id, max outstanding messages/bytes (divided
//     among the streams) and protocol_version 1. Every later request is
//     built from the zero value: heartbeats carry nothing initial-only, at
//     most a new stream_ack_deadline_seconds.
//   - A heartbeat goes out every HeartbeatInterval; once the server has
//     answered one, a stream it leaves unanswered for HeartbeatTimeout,
//     while the source waits to receive, is restarted. Until then (Google's
//     emulator never answers) a quiet stream is healthy.
//   - Restarts wrap only the gRPC stream: a retryable failure (see
//     DefaultClassifier) reopens it after a Backoff delay, with the same
//     client id; nothing downstream is recreated. A terminal failure ends
//     the source with an error that names the subscription and keeps the
//     gRPC status; failing longer than ReconnectTimeout ends it with an
//     *UnreachableError. Only a healthy stream (it delivered a message, or
//     stayed open 10 s) resets the backoff.
//   - The receipt steps (Steps, fused with With or by Pipeline.Via) run on
//     each response's messages on the stream's goroutine, right after
//     decoding, once malformed elements (an empty or repeated ack id, an
//     ack id without a message) are refused and counted.
//   - A message past its server deadline (or within a second of it) is
//     expired, never handed on, and an ack of it does not count.
//   - With Budgets, a stream reads only while every budget has room, opens
//     only once each grants limits, and asks the server for the least: the
//     room left, not a fresh budget per reconnect. A budget may revoke a
//     grant: the stream half-closes, reads what the server still sends,
//     and opens again. Without one, a stream reads the next response only
//     once the previous ones were handed on. The watchdog does not count
//     the time a stream is deliberately not reading.
//
// A run that ends nacks what it received and did not hand on, and what its
// pipeline left unsettled; Stop ends every run gracefully, within
// Config.DrainTimeout, and Close nacks whatever is still unsettled and
// flushes the acks.
package source
