package proptest

import (
	"runtime"
	"slices"
	"strings"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// check runs after every action (and before the first): it lets the
// consumer settle, then checks what must hold at every step.
func (m *machine) check(t *rapid.T) {
	m.settle()
	if p, ok := m.led.problems.first(); ok && !ignored(p.what) {
		m.fail(p.what, "%s", p.detail)
	}
	if !m.closed {
		m.checkRun(t)
		m.checkStats(t)
	}
	m.checkStreams(t)
}

// counts is what the consumer under test says it holds, from its own
// counters: a Subscriber's Stats, or the chain's source, extender and
// budget.
type counts struct {
	held, outstanding, outstandingBytes int64
	leases                              int64
	acking                              int64
	received, acked, settled            uint64
	ackFailures                         uint64
}

func (m *machine) counts() counts {
	e := m.env
	if !e.chain {
		st := e.sub.Stats()
		return counts{
			held: st.Buffered + st.Processing, outstanding: st.Outstanding, outstandingBytes: st.OutstandingBytes,
			leases: int64(st.Leases), acking: st.Acking,
			received: st.Received, acked: st.Acked, settled: st.Acked + st.Nacked + st.NoOps + st.Expired + st.AckRefused,
			ackFailures: st.AckFailures,
		}
	}
	c := counts{leases: int64(e.ext.Stats().Leases)}
	for _, src := range e.srcs {
		ss := src.Stats()
		c.held += ss.Unsettled
		c.acking += ss.Acking
		c.received += ss.Received
		c.acked += ss.Acked
		c.settled += ss.Acked + ss.Nacked + ss.NoOps + ss.Expired + ss.AckRefused
		c.ackFailures += ss.AckFailures
	}
	c.outstanding, c.outstandingBytes = e.fcs[0].Outstanding(), e.fcs[0].OutstandingBytes()
	return c
}

// budget is one budget of the consumer: what it counts, and its limits.
type budget struct {
	outstanding, outstandingBytes int64
	limit, bytes                  int64
}

// budgets are the consumer's budgets: a Subscriber's, or each gate's of
// the chain.
func (m *machine) budgets(c counts) []budget {
	if !m.env.chain {
		return []budget{{c.outstanding, c.outstandingBytes, m.cfg.Limit, m.cfg.Bytes}}
	}
	var bs []budget
	for _, fc := range m.env.fcs {
		bs = append(bs, budget{fc.Outstanding(), fc.OutstandingBytes(), fc.MaxMessages(), fc.MaxBytes()})
	}
	return bs
}

// checkStats checks the consumer's own counters against each other and
// their bounds, exactly: no tolerance.
func (m *machine) checkStats(t *rapid.T) {
	c := m.counts()
	// Invariant 1: every message held is leased, and so is every acked
	// message until its ack is final; nothing else is. An ack on its way
	// keeps its lease only while the lease holds: one that lapsed (the
	// machine failed every extension) is dropped, and its ack may come
	// too late (checkAckCount).
	lapses := m.led.extensionsFailed()
	if c.leases < c.held || c.leases > c.held+c.acking || !lapses && c.leases != c.held+c.acking {
		m.fail(invLeases, "%d leases, but %d messages held and %d acks on their way (extensions failed at some point: %v): %+v", c.leases, c.held, c.acking, lapses, c)
	}
	// Invariant 2: flow control counts exactly what is held, within its
	// limits: every budget of the consumer.
	for i, b := range m.budgets(c) {
		m.checkBudget(i, b, c)
	}
}

// checkBudget checks invariant 2 on one budget, exactly.
func (m *machine) checkBudget(i int, b budget, c counts) {
	if b.outstanding != c.held {
		m.fail(invOutstanding, "budget %d: Outstanding %d, held %d: %+v; server %+v", i, b.outstanding, c.held, c, m.srv.SubscriptionStats(m.subName))
	}
	if b.outstanding > b.limit && !ignored(invOverLimit) {
		m.fail(invOverLimit, "budget %d: Outstanding %d > limit %d", i, b.outstanding, b.limit)
	}
	// The byte limit holds except for a message larger than what its
	// stream was granted, which the service sends alone on that stream:
	// at most one such message per stream.
	if streams := m.streamsOpen(); b.bytes > 0 && b.outstandingBytes > b.bytes+streams*m.largestMessage() {
		m.fail(invOverLimit, "budget %d: OutstandingBytes %d > limit %d + %d streams × largest message %d, with %d messages out",
			i, b.outstandingBytes, b.bytes, streams, m.largestMessage(), b.outstanding)
	}
}

// streamsOpen is how many streams the consumer keeps open.
func (m *machine) streamsOpen() int64 {
	return int64(m.cfg.Streams * max(1, len(m.env.srcs)))
}

// largestMessage is an upper bound of the encoded size of a published
// message.
func (m *machine) largestMessage() int64 {
	if m.opts.Message != nil {
		return 10 << 20 // the user's messages: the service's limit
	}
	return int64(m.cfg.MaxPayload) + 256
}

// checkStreams checks invariant 5 on every request of every stream, and
// invariant 6's stable client id and divided budget.
func (m *machine) checkStreams(t *rapid.T) {
	streams := m.srv.Streams(m.subName)
	if ss := m.srv.SubscriptionStats(m.subName); ss.RejectedRequests != 0 {
		m.fail(invRequest, "the server rejected %d requests", ss.RejectedRequests)
	}
	n := int64(m.cfg.Streams)
	for _, s := range streams {
		if s.Rejected != 0 {
			m.fail(invRequest, "stream %d: %d requests rejected: %s", s.ID, s.Rejected, s.Err)
		}
		reqs := s.RequestLog
		if len(reqs) == 0 {
			continue
		}
		if err := checkInitial(reqs[0], m.subName); err != "" {
			m.fail(invRequest, "stream %d initial request: %s: %v", s.ID, err, reqs[0])
		}
		for i, r := range reqs[1:] {
			if err := checkLater(r); err != "" {
				m.fail(invRequest, "stream %d request %d: %s: %v", s.ID, i+1, err, r)
			}
		}
		if s.ClientID != reqs[0].GetClientId() {
			m.fail(invClientID, "stream %d: server saw client id %q, request had %q", s.ID, s.ClientID, reqs[0].GetClientId())
		}
		if s.ID > int64(m.mainStreams()) {
			continue // the drain subscriber's
		}
		if ids := m.clientIDs(); !slices.Contains(ids, s.ClientID) {
			m.fail(invClientID, "stream %d has client id %q, the consumer's are %q", s.ID, s.ClientID, ids)
		}
		if perStream := ceilDiv(m.cfg.Limit, n); s.MaxOutstandingMessages > perStream {
			m.fail(invShare, "stream %d: max outstanding messages %d, more than its share %d of %d over %d streams",
				s.ID, s.MaxOutstandingMessages, perStream, m.cfg.Limit, n)
		}
	}
}

// clientIDs are the client ids of the consumer: one per source.
func (m *machine) clientIDs() []string {
	if !m.env.chain {
		return []string{m.env.sub.ClientID()}
	}
	var ids []string
	for _, src := range m.env.srcs {
		ids = append(ids, src.ClientID())
	}
	return ids
}

// mainStreams is how many streams the consumer under test opened: all of
// them while it is open, and those before the drain afterwards.
func (m *machine) mainStreams() int {
	if m.drainFrom > 0 {
		return m.drainFrom
	}
	return len(m.srv.Streams(m.subName))
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// checkInitial returns what is wrong with a stream's first request, or "".
func checkInitial(r *pubsubpb.StreamingPullRequest, sub string) string {
	switch {
	case r.GetSubscription() != sub:
		return "subscription " + r.GetSubscription()
	case r.GetClientId() == "":
		return "no client id"
	case r.GetProtocolVersion() != 1:
		return "protocol version not 1"
	case r.GetStreamAckDeadlineSeconds() < 10 || r.GetStreamAckDeadlineSeconds() > 600:
		return "stream ack deadline outside 10–600 s"
	case len(r.GetAckIds()) > 0 || len(r.GetModifyDeadlineAckIds()) > 0:
		return "acks or modacks on the stream (they go by unary RPC)"
	}
	return ""
}

// checkLater returns what is wrong with a later request, or "": it must be
// the zero value but for stream_ack_deadline_seconds.
func checkLater(r *pubsubpb.StreamingPullRequest) string {
	c := proto.Clone(r).(*pubsubpb.StreamingPullRequest)
	if d := c.GetStreamAckDeadlineSeconds(); d != 0 && (d < 10 || d > 600) {
		return "stream ack deadline outside 10–600 s"
	}
	c.StreamAckDeadlineSeconds = 0
	if !proto.Equal(c, &pubsubpb.StreamingPullRequest{}) {
		return "not built from the zero value (only stream_ack_deadline_seconds may be set)"
	}
	return ""
}

// Goroutines are told apart by their stacks: the library's (the source,
// the extender, the acknowledger, a Subscriber), the topology's (the
// user's stages and the library's stages the user composed: operators,
// pipeline, sink, publisher, and this package's probe and runs), and the
// rest (the test server, gRPC's transport). Only the caller's synctest
// bubble is looked at.
const (
	ownerLibrary  = "library"
	ownerTopology = "topology"
	ownerOther    = "other"
)

// module is the library's module path.
const module = "github.com/pubsubflow/pubsubflow"

// frameOwner says whose a function (a stack frame's) is: the library's
// core (the root package, source, flow, internal), the topology's (the
// stages a user composes — the root package's Streams and Filter,
// operators, pipeline, sink, publisher, go-streams — this package's probe
// and runs, and any other module's code), or nobody's ("": the standard
// library, gRPC, the test server). A composed stage's goroutines end with
// the topology's run, after Close, so they must not count as the
// library's when Close returns.
func frameOwner(fn string) string {
	switch {
	case strings.HasPrefix(fn, module+".Streams"), strings.HasPrefix(fn, module+".Filter"):
		return ownerTopology
	case strings.HasPrefix(fn, module+"."):
		return ownerLibrary
	case strings.HasPrefix(fn, module+"/"):
		rest := strings.TrimPrefix(fn, module+"/")
		switch {
		case strings.HasPrefix(rest, "stage.Unbatch"):
			return ownerTopology // the hand-offs between a pipeline's stages
		case strings.HasPrefix(rest, "source."), strings.HasPrefix(rest, "flow."), strings.HasPrefix(rest, "internal/"):
			return ownerLibrary
		case strings.HasPrefix(rest, "stage."), strings.HasPrefix(rest, "pubsubtest."):
			return "" // the group every stage runs in; the server
		}
		return ownerTopology
	}
	if strings.HasPrefix(fn, "main.") {
		return ownerTopology // a command's own code
	}
	first, _, slash := strings.Cut(fn, "/")
	if !slash || !strings.Contains(first, ".") {
		return "" // the standard library
	}
	for _, infra := range []string{"google.golang.org/", "golang.org/x/", "cloud.google.com/", "go.opentelemetry.io/", "github.com/googleapis/", "pgregory.net/rapid", "go.uber.org/"} {
		if strings.HasPrefix(fn, infra) {
			return ""
		}
	}
	return ownerTopology // go-streams, the user's own code
}

// libraryGoroutines returns the stacks of the library's goroutines now.
func libraryGoroutines() []string {
	return goroutines(func(o string) bool { return o == ownerLibrary })
}

// leftGoroutines returns the stacks of the library's and the topology's
// goroutines now, but the caller's.
func leftGoroutines() []string { return goroutines(func(o string) bool { return o != ownerOther }) }

func goroutines(keep func(owner string) bool) []string {
	self := make([]byte, 256)
	self = self[:runtime.Stack(self, false)]
	selfHeader, _, _ := strings.Cut(string(self), "\n")
	selfID, _, _ := strings.Cut(strings.TrimPrefix(selfHeader, "goroutine "), " ")
	bubble := ""
	if _, rest, ok := strings.Cut(selfHeader, ", synctest bubble "); ok {
		bubble, _, _ = strings.Cut(rest, "]")
		bubble = ", synctest bubble " + bubble + "]"
	}
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := map[string]string{} // goroutine id → stack
	var order []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(header, bubble) {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
		stacks[id] = g
		order = append(order, id)
	}
	var out []string
	for _, id := range order {
		if id != selfID && keep(owner(stacks, id, 0)) {
			out = append(out, stacks[id])
		}
	}
	return out
}

// owner classifies a goroutine by its frames: the topology's if any frame
// is, else the library's if any frame is; one that has not started its
// own code yet (a stage.Group goroutine) belongs to its creator.
func owner(stacks map[string]string, id string, depth int) string {
	g := stacks[id]
	body, created, _ := strings.Cut(g, "\ncreated by ")
	lib, server := false, false
	for _, line := range strings.Split(body, "\n")[1:] {
		if strings.HasPrefix(line, "\t") {
			continue // a file:line
		}
		switch frameOwner(line) {
		case ownerTopology:
			return ownerTopology
		case ownerLibrary:
			lib = true
		}
		if strings.HasPrefix(line, module+"/pubsubtest.") {
			server = true
		}
	}
	switch {
	case lib:
		return ownerLibrary
	case server || !strings.Contains(body, module+"/stage.(*Group).Go.func1") || depth > 8:
		return ownerOther
	}
	_, creator, ok := strings.Cut(created, " in goroutine ")
	creator, _, _ = strings.Cut(creator, "\n")
	if !ok || stacks[creator] == "" {
		return ownerLibrary // its creator is gone: nobody can stop it but Close
	}
	return owner(stacks, creator, depth+1)
}

// blockedGoroutines keeps the stacks of goroutines that are blocked: not
// running nor runnable.
func blockedGoroutines(stacks []string) []string {
	var out []string
	for _, g := range stacks {
		header, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(header, "[running") && !strings.Contains(header, "[runnable") {
			out = append(out, g)
		}
	}
	return out
}
