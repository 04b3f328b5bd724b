package proptest

import (
	"runtime"
	"strings"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/pubsubflow/pubsubflow"
)

// check runs after every action (and before the first): it lets the
// subscriber settle, then checks the invariants that must hold at every
// step.
func (m *machine) check(t *rapid.T) {
	m.settle()
	if vs := m.led.Violations(); len(vs) > 0 {
		fail(t, "invariants 1/3/6 (ledger): "+vs[0].kind, "%s", vs[0].detail)
	}
	if !m.closed {
		m.checkStats(t)
	}
	m.checkStreams(t)
}

// checkStats checks the subscriber's own counters against its bounds,
// exactly: no tolerance.
func (m *machine) checkStats(t *rapid.T) {
	st := m.sub.Stats()
	held := st.Buffered + st.Processing // received and not settled
	limit := m.cfg.MaxOutstandingMessages

	// Invariant 1: everything held is leased (acked messages keep their
	// lease until the ack is final, so leases may exceed what is held).
	if l := leased(st); l < held {
		fail(t, "invariant 1: held messages that are not leased", "%d messages held (buffered %d, processing %d) but only %d leased (%d leases, %d of them acks on their way)",
			held, st.Buffered, st.Processing, l, st.Leases, st.Acking)
	}
	// Invariant 2: flow control counts exactly what is held, within its
	// limits.
	if st.Outstanding != held {
		fail(t, "invariant 2: Outstanding is not what the client holds", "Outstanding %d, held %d (buffered %d, processing %d): %+v; server %+v",
			st.Outstanding, held, st.Buffered, st.Processing, st, m.srv.SubscriptionStats(m.subName))
	}
	if st.Outstanding > limit {
		fail(t, "invariant 2: Outstanding over the limit", "Outstanding %d > limit %d", st.Outstanding, limit)
	}
	// The byte limit holds except for a message larger than what its
	// stream was granted, which the service sends alone on that stream:
	// at most one such message per stream.
	if b := m.cfg.MaxOutstandingBytes; b > 0 && st.OutstandingBytes > b+int64(m.cfg.Streams)*m.largestMessage() {
		fail(t, "invariant 2: OutstandingBytes over the limit", "OutstandingBytes %d > limit %d + %d streams × largest message %d, with %d messages out",
			st.OutstandingBytes, b, m.cfg.Streams, m.largestMessage(), st.Outstanding)
	}
	// Invariant 4: the processing stage holds at most its workers'
	// messages beyond what the budget lets in; the budget bounds the rest.
	if held > limit {
		fail(t, "invariant 4: more messages held than the budget", "%d messages held, budget %d", held, limit)
	}
}

// leased is how many held (unsettled) messages are leased: acked messages
// keep their lease until the ack is final.
func leased(st pubsubflow.Stats) int64 { return int64(st.Leases) - st.Acking }

// checkStreams checks invariant 5 on every request of every stream, and
// invariant 6's stable client id and divided budget.
func (m *machine) checkStreams(t *rapid.T) {
	streams := m.srv.Streams(m.subName)
	if ss := m.srv.SubscriptionStats(m.subName); ss.RejectedRequests != 0 {
		fail(t, "invariant 5: the server rejected requests", "the server rejected %d requests", ss.RejectedRequests)
	}
	n := int64(m.cfg.Streams)
	for _, s := range streams {
		if s.Rejected != 0 {
			fail(t, "invariant 5: a stream's request was rejected", "stream %d: %d requests rejected: %s", s.ID, s.Rejected, s.Err)
		}
		reqs := s.RequestLog
		if len(reqs) == 0 {
			continue
		}
		if err := checkInitial(reqs[0], m.subName); err != "" {
			fail(t, "invariant 5: a bad initial request: "+err, "stream %d initial request: %s: %v", s.ID, err, reqs[0])
		}
		for i, r := range reqs[1:] {
			if err := checkLater(r); err != "" {
				fail(t, "invariant 5: a later request: "+err, "stream %d request %d: %s: %v", s.ID, i+1, err, r)
			}
		}
		if s.ClientID != reqs[0].GetClientId() {
			fail(t, "the server's client id differs from the request's", "stream %d: server saw client id %q, request had %q", s.ID, s.ClientID, reqs[0].GetClientId())
		}
		if s.ID > int64(m.mainStreams()) {
			continue // the drain subscriber's
		}
		if s.ClientID != m.sub.ClientID() {
			fail(t, "invariant 6: a stream with another client id", "stream %d has client id %q, the subscriber's is %q", s.ID, s.ClientID, m.sub.ClientID())
		}
		if perStream := ceilDiv(m.cfg.MaxOutstandingMessages, n); s.MaxOutstandingMessages > perStream {
			fail(t, "a stream asked for more than its share of the budget", "stream %d: max outstanding messages %d, more than its share %d of %d over %d streams",
				s.ID, s.MaxOutstandingMessages, perStream, m.cfg.MaxOutstandingMessages, n)
		}
	}
}

// mainStreams is how many streams the subscriber under test opened: all of
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

// subscriberGoroutines returns the stacks of the goroutines now running
// code of the subscriber (the library's packages), leaving out the
// server's and the user's part of a pipeline (the workers of Process, the
// Acknowledge sink, pipeline.To and this package's run goroutines), which
// end with the pipeline's context, not with Close. A goroutine that has not
// started yet shows no code of its own: it is attributed to its creator.
//
// Only the caller's synctest bubble is looked at: other tests' goroutines
// are not this case's business.
func subscriberGoroutines() []string {
	self := make([]byte, 256)
	self = self[:runtime.Stack(self, false)]
	bubble := ""
	if _, rest, ok := strings.Cut(string(self), ", synctest bubble "); ok {
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
	var ids []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(header, bubble) {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
		stacks[id] = g
		ids = append(ids, id)
	}
	var out []string
	for _, id := range ids {
		if owner(stacks, id, 0) == "subscriber" {
			out = append(out, stacks[id])
		}
	}
	return out
}

// owner classifies a goroutine as "subscriber", "user" or "other".
func owner(stacks map[string]string, id string, depth int) string {
	g := stacks[id]
	body, created, _ := strings.Cut(g, "\ncreated by ")
	for _, user := range []string{
		"pubsubflow/operators.",
		"pubsubflow/sink.Acknowledge",
		"pubsubflow/pipeline.Pipeline",
		"pubsubflow/proptest.(*machine).startRun",
	} {
		if strings.Contains(body, user) {
			return "user"
		}
	}
	if strings.Contains(body, "pubsubflow/pubsubtest.") {
		return "other"
	}
	// Frames of the library other than the group wrapper that every
	// stage goroutine starts in.
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "github.com/pubsubflow/pubsubflow/") &&
			!strings.HasPrefix(line, "github.com/pubsubflow/pubsubflow/stage.(*Group).Go.func1") &&
			!strings.HasPrefix(line, "github.com/pubsubflow/pubsubflow/proptest.") {
			return "subscriber"
		}
	}
	if !strings.Contains(body, "github.com/pubsubflow/pubsubflow/stage.(*Group).Go.func1") || depth > 8 {
		return "other"
	}
	// Not started yet: whoever created it decides.
	_, creator, ok := strings.Cut(created, " in goroutine ")
	creator, _, _ = strings.Cut(creator, "\n")
	if !ok || stacks[creator] == "" {
		return "subscriber" // its creator is gone: nobody can stop it but Close
	}
	return owner(stacks, creator, depth+1)
}

// largestMessage is the encoded size of the largest message published so
// far (an upper bound: payload plus the attributes and ids the machine
// adds).
func (m *machine) largestMessage() int64 { return int64(m.maxPayload) + 256 }

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
