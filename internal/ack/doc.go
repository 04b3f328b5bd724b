// Package ack is a source's acknowledger: the one place that sends its
// acks and nacks to Pub/Sub.
//
// Ack ids are batched per kind (Acknowledge; ModifyAckDeadline per deadline)
// and sent by unary RPC — never on the stream, so a slow RPC cannot block
// receiving. An ack id goes out at once when no request of its kind is in
// flight; while one is, later ids gather behind it and leave when it
// completes (send now, else coalesce). So at low load an ack reaches the
// server one round trip after it was made, and under load each request
// carries what arrived during the previous one's round trip: the requests
// per ack stay few without a flush timer. A batch that reaches 1000 ack
// ids or 512 KiB encoded goes at once too (requests are cut with
// internal/ackids, so no request ever exceeds either), and Flush and Close
// send everything.
//
// Config.Gap (DefaultGap, 1 ms) is the one knob between latency and
// requests: two requests of a kind that are not full start at least Gap
// apart, so however short the round trip, a request carries at least
// Gap's worth of acks (at most 1,000 requests a second per kind). At low
// load it costs nothing, as the last request is long gone; an id that
// arrives within Gap of the last request waits for the one timer that
// also serves retries. That timer and the round trip of the request in
// flight are what replaced the 100 ms flush ticker: no ack waits for a
// tick. BenchmarkAckLatency (bench/) measures both ends: about half a
// millisecond from delivery to the server's answer at 10 messages a
// second, and a few requests per thousand acks at full load.
//
// At most Config.MaxInFlight RPCs per kind are in flight. Transient
// failures are retried with backoff within a retry deadline (60 s; 600 s
// for exactly-once); ack ids that fail for good are reported as an
// event.AckFailed and their Tag hears the *IDError.
//
// Exactly-once delivery: the server reports failures per ack id in an
// errdetails.ErrorInfo whose metadata maps ack id → reason. Reasons with the
// prefix TRANSIENT_ are retried, other reasons fail that ack id for good,
// and ack ids absent from the metadata succeeded (as the service and
// pubsubtest behave; Google's Go client instead fails them with the RPC's
// status).
package ack
