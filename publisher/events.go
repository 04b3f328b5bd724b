package publisher

import "github.com/pubsubflow/pubsubflow/internal/event"

// Event kinds the Publisher reports through Config.Events, besides
// event.Retry (a batch is retried after Delay; Err is the failure).
const (
	// EventPublished: a batch of Count messages was published.
	EventPublished event.Kind = "published"
	// EventPublishFailed: a batch of Count messages failed for good (Err).
	EventPublishFailed event.Kind = "publish_failed"
	// EventPaused: an ordering key was paused; Count messages queued behind
	// the failed batch failed with it (Err is the *PausedError).
	EventPaused event.Kind = "paused"
)
