// Package publisher publishes messages to one Pub/Sub topic through a
// batching worker, and offers the publish step of a pipeline (Stage). It
// imports nothing of the subscriber side; pubsubflow.Forward joins the
// two in a relay.
//
// Publish never sends an RPC itself: it takes a flow-control permit, adds
// the message to the open batch of its ordering key and returns a Result
// at once. A batch closes when it reaches Config.MaxMessages (default 100)
// or Config.MaxBytes (default 1 MB), or when Config.Delay (default 10 ms)
// has passed since its first message, and never exceeds the API's limits
// (1000 messages, 10 MB per request). Closed batches are sent by at most
// Config.MaxInFlightBatches goroutines, started on demand; a transient
// failure is retried with backoff until Config.RetryDeadline. A request
// is encoded as gRPC's proto codec encodes it (the same bytes and content
// subtype) but into a buffer of the next power of two of its size, not
// zeroed, from a pool of the package's: gRPC's own pool would take a 1 MiB
// buffer for a batch of 100 KB and zero all of it.
//
// Ordering keys (Config.EnableOrdering): messages with the same key are
// sent in Publish order, with at most one batch of a key in flight. When a
// batch of a key fails for good, the key is paused: the messages queued
// behind it and every later Publish with that key fail at once with an
// *Error whose Kind is ErrPaused until ResumePublish(key).
//
// A message the service would refuse fails at once with an *Error whose
// Kind is ErrInvalidMessage, before it is queued, so it never fails the
// other messages of its batch.
//
// Flow control (Config.Flow) bounds the messages and bytes published and
// not yet settled; at the limit Publish blocks (the default) or fails fast
// with ErrFlowControlled.
//
// Hedging (Config.Hedging, off by default): a batch without an ordering
// key whose Publish is slow gets a duplicate attempt after a delay; the
// first success wins and the others are cancelled, within a token bucket
// that successes refill. A hedge can publish a message twice, which
// Pub/Sub's at-least-once delivery already allows for.
//
// Telemetry: Stats counts messages, batches and retries; Config.Logger
// logs retries and failures; Config.TracerProvider traces each message as
// Google's clients do.
//
// Close flushes every batch, waits for their results and stops every
// goroutine the Publisher started.
package publisher
