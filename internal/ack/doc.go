// Package ack is a subscriber's acknowledger: the one place that sends
// acks, nacks and deadline modifications to Pub/Sub, shared by the settle
// path (sink), the lease extender and shutdown.
//
// Ack ids are batched per kind (Acknowledge; ModifyAckDeadline per deadline)
// and sent by unary RPC — never on the stream, so a slow RPC cannot block
// receiving — when:
//
//   - the flush interval (100 ms by default) ticks;
//   - a batch reaches 1000 ack ids or 512 KiB encoded (requests are cut with
//     internal/ackids, so no request ever exceeds either);
//   - the flow-control budget says the acks held back now starve the
//     subscriber (Config.Flow), so throughput is not capped at max
//     outstanding ÷ flush interval;
//   - Flush or Close asks.
//
// At most Config.MaxInFlight RPCs per kind are in flight; while they are
// all busy, ack ids keep accumulating into fuller batches. Transient
// failures are retried with backoff within a retry deadline (60 s; 600 s
// for exactly-once); ack ids that fail for good are reported as an
// event.AckFailed and, for exactly-once, settle their message.Result with
// an *IDError.
//
// Exactly-once delivery: the server reports failures per ack id in an
// errdetails.ErrorInfo whose metadata maps ack id → reason. Reasons with the
// prefix TRANSIENT_ are retried, other reasons fail that ack id for good,
// and ack ids absent from the metadata succeeded (as the service and
// pubsubtest behave; Google's Go client instead fails them with the RPC's
// status).
package ack
