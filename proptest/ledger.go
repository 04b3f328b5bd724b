package proptest

import (
	"context"
	"fmt"
	"iter"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/internal/message"
	"github.com/pubsubflow/pubsubflow/source"
)

// ledger wraps the SubscriberClient of the consumer under test. It sees
// the wire — every delivery the client receives, every modack, ack and
// nack it sends, every stream request — and, through the probe (env.go),
// what the topology does with each delivery: when it got it, how it
// settled it. It is the model the machine checks the consumer against,
// independent of the consumer's own counters.
//
// Rules checked as events happen (the first violations are kept):
//   - a message is redelivered only after the client gave its previous
//     delivery up (nacked it, settled it without telling the server, or
//     could not extend its lease because the machine failed every
//     extension): otherwise its lease lapsed while the client held it
//     (invariants 1 and 6);
//   - no ack id is settled (acked or nacked successfully) twice, and no
//     ack is sent for a copy the server had already given out again
//     (invariants 3 and 8);
//   - the topology is never handed a copy the server has released
//     (invariant 8), and acks, side effects and ordering keep the
//     declared properties (observe.go).
type ledger struct {
	pubsubpb.SubscriberClient

	mu      sync.Mutex
	byAck   map[string]*delivery
	last    map[string]*delivery // message id → its latest delivery
	all     []*delivery
	msgs    map[string]*published
	failExt time.Time // modacks with seconds > 0 fail until then
	// extRefused: an extension was refused for good (a lease may lapse).
	extRefused bool
	windows    []window // every time extensions failed
	seq        int64    // hand-offs so far
	problems   problems
	// disturbed: a fault or a stall has been in force since quietSince,
	// so latencies do not count (MaxLatency).
	disturbed  bool
	quietSince time.Time
}

// delivery is one delivery of a message (one ack id), as the wire and the
// topology saw it.
type delivery struct {
	ackID   string
	msgID   string
	attempt int32
	recvAt  time.Time
	// streamDeadline is the stream ack deadline the client had asked for
	// when it received the delivery; maxStreamDeadline the longest it had
	// asked for on that stream (the server may not have applied a change
	// yet).
	streamDeadline, maxStreamDeadline time.Duration
	// modacks are the extensions the server accepted, in send order.
	modacks []modackCall
	// tracked: a ModifyAckDeadline with seconds > 0 for it was started.
	tracked bool
	// ackTried / nackTried: an Acknowledge / a ModifyAckDeadline of 0 s for
	// it was started; acks / nacks count the ones that succeeded.
	ackTried, nackTried bool
	acks, nacks         int
	// extFailed: the machine failed an extension of it (ExtendFail), so
	// its lease may lapse: the client must expire it.
	extFailed bool
	// refused: the server refused its ack or an extension of it for good
	// (the machine's PERMISSION_DENIED with an ErrorInfo): the ack is no
	// ack, the lease is not extended, and the server delivers it again.
	refused bool
	// abandoned: its ack had not succeeded when a bounded Close gave up
	// the flush (counted in AckRefused): the server delivers it again.
	abandoned bool
	// What the topology did with it (see probe and observer).
	handed   bool
	handedAt time.Time
	seq      int64          // hand-off order within its ordering key
	outcome  source.Outcome // the client's outcome, when the topology saw it settle
	settleAt time.Time      // when the client settled it (zero: not seen)
	history  []string       // for failure messages
}

// window is a time extensions failed: [from, until).
type window struct{ from, until time.Time }

// modackCall is one successful ModifyAckDeadline with seconds > 0.
type modackCall struct {
	sent, replied time.Time
	secs          int32
}

// published is what the machine published.
type published struct {
	id    string
	n     int // publish order
	at    time.Time
	key   string
	fresh bool // published in the quiet phase
	// effects counts the acks the topology made with the side effect
	// recorded; settled counts its settles of any kind.
	acked bool
}

func (d *delivery) note(format string, args ...any) {
	if len(d.history) < maxHistoryEntries {
		d.history = append(d.history, time.Now().Format("04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

func (d *delivery) settledOnWire() bool { return d.acks+d.nacks > 0 }

// gaveUp reports whether the client let the server have the message
// back: a nack sent, or an outcome that tells the server nothing (the
// server redelivers when its deadline passes), or an extension the
// machine failed (the client must expire the copy, not keep it).
func (d *delivery) gaveUp() bool {
	switch d.outcome {
	case source.NoOp, source.NackAfter, source.Expired:
		return true
	}
	return d.nackTried || d.extFailed || d.abandoned || d.refused
}

// serverDeadline is a time by which the server has surely released the
// delivery (an upper bound of its deadline there): its receipt plus the
// longest stream deadline asked for, or the reply of the last extension
// plus its seconds. An extension sent after another's reply supersedes it.
func (d *delivery) serverDeadline() time.Time {
	u := d.recvAt.Add(d.maxStreamDeadline)
	var lastSent time.Time
	for _, c := range d.modacks {
		if c.sent.After(lastSent) {
			lastSent = c.sent
		}
	}
	if len(d.modacks) > 0 {
		u = time.Time{}
		for _, c := range d.modacks {
			// A call answered before the last one was sent was superseded.
			if c.replied.Before(lastSent) {
				continue
			}
			if t := c.replied.Add(time.Duration(c.secs) * time.Second); t.After(u) {
				u = t
			}
		}
	}
	return u
}

// mayHaveExpired reports whether the client may have expired the copy by
// now on its own: at some moment its deadline as the client knew it (the
// receipt's, then each accepted extension's from its reply on) was within
// its settle margin (message.Margin), before the next extension's reply moved it.
func (d *delivery) mayHaveExpired(now time.Time) bool {
	calls := append([]modackCall(nil), d.modacks...)
	sort.Slice(calls, func(i, j int) bool { return calls[i].replied.Before(calls[j].replied) })
	due, margin := d.recvAt.Add(d.streamDeadline), message.Margin(d.streamDeadline)
	for _, c := range calls {
		if !c.replied.Before(due.Add(-margin)) {
			return true
		}
		length := time.Duration(c.secs) * time.Second
		due, margin = c.sent.Add(length), message.Margin(length)
	}
	return !now.Before(due.Add(-margin))
}

func (d *delivery) String() string {
	return fmt.Sprintf("message %s attempt %d (ack id %s, received %s, handed %v, outcome %v, ack tried %v ok %d, nack tried %v ok %d, extension failed %v; history: %s)",
		d.msgID, d.attempt, short(d.ackID), d.recvAt.Format("04:05.000"), d.handed, d.outcome, d.ackTried, d.acks, d.nackTried, d.nacks, d.extFailed,
		strings.Join(d.history, "; "))
}

// short shortens an ack id for messages.
func short(id string) string {
	if len(id) > 12 {
		return id[len(id)-12:]
	}
	return id
}

func newLedger(c pubsubpb.SubscriberClient) *ledger {
	return &ledger{
		SubscriberClient: c,
		byAck:            map[string]*delivery{},
		last:             map[string]*delivery{},
		msgs:             map[string]*published{},
	}
}

// publish records messages the machine published.
func (l *ledger) publish(ids []string, keys []string, fresh bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, id := range ids {
		l.msgs[id] = &published{id: id, n: len(l.msgs), at: now, key: keys[i], fresh: fresh}
	}
}

func (l *ledger) received(resp *pubsubpb.StreamingPullResponse, cur, longest time.Duration) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rm := range resp.GetReceivedMessages() {
		d := &delivery{
			ackID: rm.GetAckId(), msgID: rm.GetMessage().GetMessageId(), attempt: rm.GetDeliveryAttempt(), recvAt: now,
			streamDeadline: cur, maxStreamDeadline: longest,
		}
		d.note("received")
		if prev := l.last[d.msgID]; prev != nil && !prev.gaveUp() && !prev.acked() && !l.failedDuring(prev.recvAt, now) {
			l.problems.add(invLeaseLapse, "message %s redelivered (attempt %d) at %s while the client held its previous delivery: %v",
				d.msgID, d.attempt, now.Format("04:05.000"), prev)
		}
		l.last[d.msgID] = d
		l.byAck[d.ackID] = d
		l.all = append(l.all, d)
	}
}

// acked: an ack succeeded for it (a redelivery after a successful ack is
// the server's business, not a lapse).
func (d *delivery) acked() bool { return d.acks > 0 }

// known yields the deliveries of the ack ids the ledger knows (the others
// are not the machine's), in order; the caller holds l.mu.
func (l *ledger) known(ids []string) iter.Seq[*delivery] {
	return func(yield func(*delivery) bool) {
		for _, id := range ids {
			if d := l.byAck[id]; d != nil && !yield(d) {
				return
			}
		}
	}
}

func (l *ledger) modackStart(ids []string, seconds int32, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for d := range l.known(ids) {
		d.note("modack %ds sent", seconds)
		switch {
		case seconds > 0:
			d.tracked = true
			if failed {
				d.extFailed = true
				d.note("modack failed by the machine (extensions failing)")
			}
		default:
			d.nackTried = true
		}
	}
}

func (l *ledger) modackEnd(ids []string, seconds int32, sent time.Time, err error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for d := range l.known(ids) {
		d.note("modack %ds returned %v", seconds, err)
		if err != nil {
			if seconds > 0 && refusal(err) {
				d.refused, l.extRefused = true, true
			}
			continue
		}
		if seconds > 0 {
			d.modacks = append(d.modacks, modackCall{sent: sent, replied: now, secs: seconds})
			continue
		}
		d.nacks++
		l.checkOnce(d)
	}
}

func (l *ledger) ackStart(ids []string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for d := range l.known(ids) {
		d.note("ack sent")
		d.ackTried = true
		if newer := l.last[d.msgID]; newer != d && !d.settledOnWire() {
			l.problems.add(invStaleAck, "an ack of message %s was sent at %s after the server had delivered it again (attempt %d): the client counts an ack the server ignores: %v",
				d.msgID, now.Format("04:05.000"), newer.attempt, d)
		} else if u := d.serverDeadline(); !now.Before(u) && !d.settledOnWire() {
			l.problems.add(invStaleAck, "an ack of message %s was sent at %s, after the server released it (by %s at the latest): the client counts an ack the server ignores: %v",
				d.msgID, now.Format("04:05.000"), u.Format("04:05.000"), d)
		}
	}
}

func (l *ledger) ackEnd(ids []string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for d := range l.known(ids) {
		d.note("ack returned %v", err)
		if refusal(err) {
			d.refused = true
		}
		if err == nil {
			d.acks++
			l.checkOnce(d)
			if p := l.msgs[d.msgID]; p != nil {
				p.acked = true
			}
		}
	}
}

func (l *ledger) checkOnce(d *delivery) {
	if d.acks+d.nacks > 1 {
		l.problems.add(invSettledTwice, "ack id settled more than once: %v", d)
	}
}

// failExtensions makes every ModifyAckDeadline with seconds > 0 fail with
// UNAVAILABLE until until (the zero time: stop).
func (l *ledger) failExtensions(until time.Time) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.windows); n > 0 && l.windows[n-1].until.After(now) {
		l.windows[n-1].until = now // the last one ends now
	}
	l.failExt = until
	if until.After(now) {
		l.windows = append(l.windows, window{now, until})
	}
}

// extensionsFailed reports whether the machine has failed extensions.
func (l *ledger) extensionsFailed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.windows) > 0 || l.extRefused
}

// refusedCount counts the deliveries refused for good (refused).
func (l *ledger) refusedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, d := range l.all {
		if d.refused {
			n++
		}
	}
	return n
}

// refusal reports whether err is the machine's refusal for good (FailInfo
// with PERMISSION_DENIED): the one permanent status it injects.
func refusal(err error) bool { return status.Code(err) == codes.PermissionDenied }

// failedDuring reports whether extensions failed at some time in [from,
// to]: a lease held then may have lapsed, and the client must have given
// the copy up. Called with l.mu held.
func (l *ledger) failedDuring(from, to time.Time) bool {
	for _, w := range l.windows {
		if w.from.Before(to) && w.until.After(from) {
			return true
		}
	}
	return false
}

// wireAcks counts the ack ids acked successfully on the wire.
func (l *ledger) wireAcks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, d := range l.all {
		if d.acks > 0 {
			n++
		}
	}
	return n
}

// unsettled returns the deliveries that are settled neither on the wire
// nor by an outcome that tells the server nothing, and that the client
// cannot have expired on its own: what the client still held, oldest
// first.
// abandonUnflushed records that a bounded Close gave up the acks that had
// not succeeded by then.
func (l *ledger) abandonUnflushed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.all {
		if d.ackTried && !d.settledOnWire() {
			d.abandoned = true
			d.note("ack abandoned by Close")
		}
	}
}

func (l *ledger) unsettled() []*delivery {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*delivery
	for _, d := range l.all {
		if d.settledOnWire() || d.gaveUp() || d.mayHaveExpired(now) {
			continue
		}
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].recvAt.Before(out[j].recvAt) })
	return out
}

// ModifyAckDeadline records the modack (tracking) or nack (0 s); while
// extensions fail, it fails those with seconds > 0 without sending them.
func (l *ledger) ModifyAckDeadline(ctx context.Context, in *pubsubpb.ModifyAckDeadlineRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	return wire{l, l.SubscriberClient}.ModifyAckDeadline(ctx, in, opts...)
}

// Acknowledge records the ack.
func (l *ledger) Acknowledge(ctx context.Context, in *pubsubpb.AcknowledgeRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	return wire{l, l.SubscriberClient}.Acknowledge(ctx, in, opts...)
}

// StreamingPull wraps the stream so that every response is recorded.
func (l *ledger) StreamingPull(ctx context.Context, opts ...grpc.CallOption) (pubsubpb.Subscriber_StreamingPullClient, error) {
	return wire{l, l.SubscriberClient}.StreamingPull(ctx, opts...)
}

// wire is one client connection of the consumer under test as the ledger
// sees it: what goes through it is recorded in l, whichever connection
// carries it (a topology of two sources has two).
type wire struct {
	l *ledger
	pubsubpb.SubscriberClient
}

// via returns a client that sends through c and records in l.
func (l *ledger) via(c pubsubpb.SubscriberClient) pubsubpb.SubscriberClient {
	return wire{l, c}
}

func (w wire) ModifyAckDeadline(ctx context.Context, in *pubsubpb.ModifyAckDeadlineRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	l := w.l
	sent := time.Now()
	l.mu.Lock()
	fail := in.GetAckDeadlineSeconds() > 0 && sent.Before(l.failExt)
	l.mu.Unlock()
	l.modackStart(in.GetAckIds(), in.GetAckDeadlineSeconds(), fail)
	if fail {
		err := status.Error(codes.Unavailable, "proptest: extensions are failing")
		l.modackEnd(in.GetAckIds(), in.GetAckDeadlineSeconds(), sent, err)
		return nil, err
	}
	out, err := w.SubscriberClient.ModifyAckDeadline(ctx, in, opts...)
	l.modackEnd(in.GetAckIds(), in.GetAckDeadlineSeconds(), sent, err)
	return out, err
}

func (w wire) Acknowledge(ctx context.Context, in *pubsubpb.AcknowledgeRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	w.l.ackStart(in.GetAckIds())
	out, err := w.SubscriberClient.Acknowledge(ctx, in, opts...)
	w.l.ackEnd(in.GetAckIds(), err)
	return out, err
}

func (w wire) StreamingPull(ctx context.Context, opts ...grpc.CallOption) (pubsubpb.Subscriber_StreamingPullClient, error) {
	s, err := w.SubscriberClient.StreamingPull(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &ledgerStream{Subscriber_StreamingPullClient: s, l: w.l, ctx: ctx}, nil
}

type ledgerStream struct {
	pubsubpb.Subscriber_StreamingPullClient
	l   *ledger
	ctx context.Context

	mu           sync.Mutex
	cur, longest time.Duration // stream ack deadlines asked for
}

// teardown is how long a cancelled stream's Recv takes to return, as over a
// real network: it makes a Close that does not wait for its streams return
// while they are still on their way out (invariant 7).
const teardown = 10 * time.Millisecond

func (s *ledgerStream) Send(req *pubsubpb.StreamingPullRequest) error {
	if secs := req.GetStreamAckDeadlineSeconds(); secs > 0 {
		d := time.Duration(secs) * time.Second
		s.mu.Lock()
		s.cur, s.longest = d, max(s.longest, d)
		s.mu.Unlock()
	}
	return s.Subscriber_StreamingPullClient.Send(req)
}

func (s *ledgerStream) Recv() (*pubsubpb.StreamingPullResponse, error) {
	resp, err := s.Subscriber_StreamingPullClient.Recv()
	if err == nil {
		s.mu.Lock()
		cur, longest := s.cur, s.longest
		s.mu.Unlock()
		s.l.received(resp, cur, longest)
	} else if s.ctx.Err() != nil {
		time.Sleep(teardown)
	}
	// Acks and modacks on the stream would bypass the ledger; the
	// source sends them by unary RPC only (DESIGN: "Acks and modacks by
	// unary RPC"), and invariant 5 checks that stream requests carry none.
	return resp, err
}
