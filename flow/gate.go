package flow

import (
	"cmp"
	"log/slog"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
	"github.com/pubsubflow/pubsubflow/stage"
)

// Gate is the eager flow-control stage: it counts a message against its
// FlowControl the moment it receives it, so Outstanding is exactly what
// the client holds, however slow downstream is (a gate that counted on
// push would count only what downstream had taken). The message's settle
// path gives the permit back, whatever ends it: there is nothing to pair.
//
// Written right after source.Subscribe in a pipeline, it is fused into
// the source (it is a source.Step whose FlowControl is the streams'
// budget): it counts where
// each response is decoded, the streams read only while there is room,
// and each stream asks the server only for the room that is left, so the
// budget holds across reconnects and runs. Anywhere else it runs as an
// eager stage: it receives while the budget has room, buffers what it
// admitted (at most MaxMessages, or stage.DefaultBound when messages are
// unlimited) and hands it on on demand; while the budget is spent it does
// not receive, so backpressure reaches upstream. A message that reaches
// it long after receipt (LateAfter) means a buffer sits before it: it
// says so once, at Warn.
//
// One FlowControl may back several gates (several sources or stages
// sharing one budget). For shares per key (per tenant) see KeyedGate.
type Gate struct {
	// Logger receives the warnings: once about a buffer before the stage,
	// once per stream a server sent past its grant (nil: slog.Default()).
	Logger *slog.Logger

	fc   *FlowControl
	late lateWarning
}

// FlowGate returns a Gate on fc.
func FlowGate(fc *FlowControl) *Gate { return &Gate{fc: fc} }

var (
	_ source.Step                                  = (*Gate)(nil)
	_ stage.Flow[*source.Message, *source.Message] = (*Gate)(nil)
)

// Receipt is the gate's part when fused into a source (source.Step): it
// counts on receipt, and its FlowControl is the streams' budget.
func (gt *Gate) Receipt(message.Key) source.Receipt {
	return source.Receipt{Receive: gt.receive, Budget: laneBudget{gt.fc}}
}

// receive counts every message of a batch decoded on lane, at once. A
// stream the server sent past its grant is warned of once.
func (gt *Gate) receive(lane int, ms []*source.Message) {
	if over, first := gt.fc.receive(lane, ms); first {
		cmp.Or(gt.Logger, slog.Default()).Warn("pubsubflow: the server sent a stream more than its flow-control grant; the client stops reading at its budget",
			"over", over, "maxMessages", gt.fc.maxMessages, "maxBytes", gt.fc.maxBytes)
	}
}

// laneBudget is a FlowControl as its streams see it (source.Budget).
type laneBudget struct{ fc *FlowControl }

// Open grants a new stream on lane the limits of its initial request; 0
// in a dimension means unlimited on the wire (see FlowControl.openLane:
// streams sharing the budget share it fairly, and revoke is called for
// a stream granted more than its fair share while another waits).
func (b laneBudget) Open(lane int, shareMessages, shareBytes int64, revoke func()) (maxMessages, maxBytes int64, ok bool) {
	return b.fc.openLane(lane, shareMessages, shareBytes, revoke)
}

// Closed returns a stream's lane; for a lane not open, it ends its wait
// to open.
func (b laneBudget) Closed(lane int) { b.fc.closeLane(lane) }

// Room reports whether the stream on lane may read on: while the messages
// and the bytes outstanding are both under their limits, or the lane
// holds less than its grant unsettled. A response a server sent within
// the grant is read at once, whatever the budget says: the server counts
// its messages from the moment it sent them, and unread they would be
// leased by no one (each stream may be sent one message larger than its
// byte grant, so a stream that stopped at the budget left the others'
// unread). A server that sends past its grant therefore gets at most one
// response more read per stream.
func (b laneBudget) Room(lane int) bool { return b.fc.Room() || b.fc.laneRoom(lane) }

// Wake is closed when room may have changed.
func (b laneBudget) Wake() <-chan struct{} { return b.fc.Wake() }

// Run starts the standalone stage's goroutine under g and returns its
// output.
func (gt *Gate) Run(g *stage.Group, in <-chan *source.Message) <-chan *source.Message {
	r := &gateRun{fc: gt.fc}
	bound := stage.DefaultBound
	if m := gt.fc.MaxMessages(); m > 0 {
		bound = int(m) // admitted messages never exceed it
	}
	e := &stage.Eager[*source.Message]{
		Bound: bound,
		Room:  r.room,
		Admit: func(m *source.Message) bool {
			gt.late.check(gt.Logger, m, "flow.FlowGate", "put FlowGate right after source.Subscribe (pipeline.From(src).Via(flow.FlowGate(fc))) so it counts on receipt and stops the streams")
			return r.admit(m)
		},
		Wake:   r.wakeCh,
		Skip:   (*source.Message).Settled,
		OnDrop: func(m *source.Message) { m.Nack() },
	}
	return e.Run(g, in)
}

// gateRun is one standalone run's state, on the stage's goroutine only.
type gateRun struct {
	fc *FlowControl
	// wake was fetched before the last failed check, so a release after
	// that check closes it (no lost wake-up).
	wake <-chan struct{}
}

func (r *gateRun) room() bool {
	if r.fc.Room() {
		return true
	}
	r.wake = r.fc.Wake()
	return r.fc.Room()
}

func (r *gateRun) admit(m *source.Message) bool {
	if r.fc.acquireOne(m) {
		return true
	}
	r.wake = r.fc.Wake()
	return r.fc.acquireOne(m)
}

func (r *gateRun) wakeCh() <-chan struct{} {
	if r.wake == nil {
		r.wake = r.fc.Wake()
	}
	w := r.wake
	r.wake = nil
	return w
}
