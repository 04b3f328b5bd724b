package pubsubflow

import (
	"github.com/reugn/go-streams"

	"github.com/pubsubflow/pubsubflow/pipeline"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Streams embeds a go-streams sub-graph (fan-out, filters, windows…)
// between a Subscriber's stages, for *Message elements. A message that the
// graph drops instead of passing on (a go-streams Filter, a window at
// shutdown) does not vanish: when the sub-graph closes it is nacked, so the
// server redelivers it. Until then its lease keeps being extended (up to
// the max extension); filter with pipeline.Filter, which nacks at once,
// where that matters.
func Streams(build func(g *stage.Group, in streams.Source) streams.Outlet) stage.Flow[*Message, *Message] {
	return pipeline.Streams[*Message, *Message](build, pipeline.StreamsOptions[*Message]{
		Lost: func(m *Message) { m.Nack() },
	})
}
