// Package pubsubtest is a strict, fast, in-process Google Cloud Pub/Sub
// server for tests. It serves pubsubpb.PublisherServer and
// pubsubpb.SubscriberServer over real gRPC, on loopback TCP or (WithBufconn)
// on an in-memory listener that works inside a testing/synctest bubble, so
// that tests about time (heartbeats, leases, expiry, backoff) run in
// virtual time.
//
// Unlike cloud.google.com/go/pubsub/v2/pstest it enforces what the real
// service enforces and what our clients claim to respect:
//
//   - StreamingPull: the first request must name an existing subscription
//     (INVALID_ARGUMENT when empty, NOT_FOUND when unknown) and set the
//     stream ack deadline (10–600 s; see WithMinAckDeadline). A later
//     request that sets subscription, client_id, max_outstanding_messages,
//     max_outstanding_bytes or protocol_version ends the stream with
//     INVALID_ARGUMENT and the service's message "You must only set
//     max_outstanding_messages and max_outstanding_bytes on the initial
//     request."; a later
//     stream_ack_deadline_seconds is allowed. A later request with neither
//     acks nor modacks is a heartbeat, answered with an empty response when
//     the stream's protocol_version is at least 1.
//   - Server-side flow control per stream: no new message while the
//     stream's unsettled messages or bytes (encoded PubsubMessage size) are
//     at max_outstanding_messages / max_outstanding_bytes (≤ 0: no limit).
//   - Up to WithMaxMessagesPerResponse messages per response (default
//     100). Work per message is O(log outstanding): queues, and one timer
//     goroutine over a heap of ack deadlines (and one of retry backoffs);
//     nothing on the delivery path scans all messages (Seek, CreateSnapshot
//     and DeleteSubscription go over one subscription's messages).
//   - Every delivery gets a fresh ack id. DeliveryAttempt (the number of
//     deliveries so far, from 1) is set as the service sets it: only on
//     subscriptions with a dead-letter policy (WithDeliveryAttemptAlways
//     sets it on every delivery). An expired deadline or a modack of 0 s (nack) makes the
//     message ready again (after the retry policy's backoff, if any); ack ids that are not live are ignored,
//     except on exactly-once subscriptions, where Acknowledge and
//     ModifyAckDeadline fail with INVALID_ARGUMENT carrying an
//     errdetails.ErrorInfo (reason "EXACTLY_ONCE_ACKID_FAILURE", domain
//     "pubsub.googleapis.com") whose metadata maps each failed ack id to
//     "PERMANENT_FAILURE_INVALID_ACK_ID", as the real service does.
//     Modack seconds must be 0–600, and Acknowledge / ModifyAckDeadline
//     requests over 512 KiB encoded are refused with INVALID_ARGUMENT.
//   - Ordering: on a subscription with message ordering, at most one
//     message per ordering key is outstanding, in publish order.
//   - Every StreamingPull response carries the subscription properties
//     (exactly-once, ordering); on exactly-once subscriptions acks and
//     modacks sent on the stream are confirmed in the next response.
//   - The service's limits and name rules (the same table the Publisher
//     and NewSubscriber check): every RPC that takes a topic or
//     subscription name refuses one the service refuses (an id of 3–255
//     of A–Z a–z 0–9 -_.~+%, starting with a letter, not with "goog"; a
//     valid project id), and Publish refuses, for the whole request, a
//     message over 10 MB, over 100 attributes, a key over 256 bytes or
//     starting with "goog" or empty, a value over 1,024 bytes, an ordering
//     key over 1,024 bytes, or a request over 10 MB — each with
//     INVALID_ARGUMENT in the service's words.
//   - Dial and ClientConn receive at most the 20 MiB
//     that pubsubflow.Dial allows, so a test sees the limits a user's
//     connection has.
//   - The subscription features of the service, with its ranges and errors:
//     dead-letter policy (5–100 attempts, INVALID_ARGUMENT outside; the
//     topic must exist, NOT_FOUND otherwise): after that many failed
//     deliveries the message is published to the dead-letter topic with
//     the attributes the service adds (CloudPubSubDeadLetterSourceDeliveryCount,
//     …SourceSubscription, …SourceSubscriptionProject and
//     …SourceTopicPublishTime) and acknowledged on its subscription; 5
//     attempts when the policy leaves them unset. Retry policy (backoffs 0–600 s):
//     a nacked or expired message waits the minimum backoff (default 10 s),
//     doubled for each earlier failure up to the maximum (default 600 s). Filters on attributes (see
//     SubscriptionConfig.Filter; a bad one is INVALID_ARGUMENT naming the
//     position; immutable): messages that do not match are acknowledged at
//     once. retain_acked_messages and message_retention_duration (10 min–7
//     days, default 7 days; unacknowledged messages older than that are dropped too), topic
//     message_retention_duration (10 min–31 days), Seek to a time or a
//     snapshot, and the snapshot calls.
//   - Every other Topic or Subscription field that is set is refused with
//     UNIMPLEMENTED naming it (push, BigQuery and Cloud Storage
//     subscriptions, expiration after inactivity, schemas, KMS keys,
//     ingestion, message transforms), never stored and ignored; labels and
//     tags are kept.
//   - WithMaxBacklogBytes bounds the memory messages take, retained and
//     snapshot ones included: past it Publish fails with
//     RESOURCE_EXHAUSTED, and nothing accepted is dropped.
//
// Tests read counters (SubscriptionStats, MessageStats, MethodStats,
// Streams) and inject faults (FailNext, FailNextWith, FailNextAckIDs, SetLatency,
// StallEvery, KillStreams, StallStreams, Restart).
//
// A Server starts no package-level goroutine and shares no state; Close
// stops every goroutine it started. Its lock is never held across a send,
// a wait or a timer. For tests in virtual time, create the server, with
// WithBufconn, and every client inside the bubble, and close them there:
//
//	synctest.Test(t, func(t *testing.T) {
//		srv, err := pubsubtest.NewServer(pubsubtest.WithBufconn(), pubsubtest.WithHeartbeatDelay(time.Millisecond))
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { srv.Close() })
//		conn := srv.ClientConn() // or srv.Dial(ctx) for a client that closes its conn
//		...
//	})
//
// Google's Go client (cloud.google.com/go/pubsub/v2) works against it over
// TCP and in a bubble; in a bubble give the server WithHeartbeatDelay (see
// there) and, after Receive returns, let 10 s of virtual time pass before
// the bubble ends so that the client's keep-alive goroutine can exit.
package pubsubtest
