package publisher

import (
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// batch is one future PublishRequest: messages of one ordering key ("" for
// unordered messages). Its fields are guarded by Publisher.mu until done is
// closed; after that ids and err are read-only.
type batch struct {
	ks        *keyState
	msgs      []*pubsubpb.PubsubMessage
	n         int // messages added (msgs is dropped once done)
	bytes     int // encoded size of the messages in a request
	flowBytes int // sum of message sizes, as flow control counted them
	open      bool
	deadline  time.Time // when Delay closes it
	done      chan struct{}
	ids       []string
	err       error
	msgErrs   []error      // per message, when single messages failed (then err is nil)
	spans     []*tracedMsg // the messages' spans, when tracing
}

// keyState is the batching state of one ordering key. The unordered
// messages share Publisher.free, whose busy and queue are unused: their
// batches go straight to the ready queue.
type keyState struct {
	key  string
	open *batch
	// busy: a batch of this key is ready or in flight; later ones wait in
	// queue so that at most one is in flight and they go out in order.
	busy   bool
	queue  []*batch
	paused *Error // Kind ErrPaused
}

func (ks *keyState) ordered() bool { return ks.key != "" }

// idle reports whether the key holds nothing and can be forgotten.
func (ks *keyState) idle() bool {
	return ks.open == nil && !ks.busy && len(ks.queue) == 0 && ks.paused == nil
}
