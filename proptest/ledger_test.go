package proptest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// delivery is one delivery of a message (one ack id) as the client's side
// of the wire saw it.
type delivery struct {
	ackID   string
	msgID   string
	attempt int32
	recvAt  time.Time
	// tracked: a ModifyAckDeadline with seconds > 0 for it was started
	// (the receipt modack or an extension), so the lease manager has it.
	tracked bool
	// ackTried / nackTried: an Acknowledge / a ModifyAckDeadline of 0 s for
	// it was started; acks / nacks count the ones that succeeded.
	ackTried, nackTried bool
	acks, nacks         int
	// dropped: neither tracked nor settled when a pipeline stopped: the
	// stop may have ended the stream after the response arrived and before
	// the client leased it, which is allowed, since the server redelivers
	// what the client never leased.
	dropped bool
	// firstTouch is when the client first sent anything for it (a modack,
	// an ack or a nack): zero until then.
	firstTouch time.Time
	// history is what happened to it, in virtual time, for failure messages.
	history []string
}

func (d *delivery) touch() {
	if d.firstTouch.IsZero() {
		d.firstTouch = time.Now()
	}
}

func (d *delivery) note(format string, args ...any) {
	if len(d.history) < 40 {
		d.history = append(d.history, time.Now().Format("04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

func (d *delivery) settled() bool { return d.acks+d.nacks > 0 }

func (d *delivery) String() string {
	return fmt.Sprintf("msg %s attempt %d (ack id %s, received %s, tracked %v, ack tried %v ok %d, nack tried %v ok %d, dropped %v; history: %s)",
		d.msgID, d.attempt, d.ackID, d.recvAt.Format("04:05.000"), d.tracked, d.ackTried, d.acks, d.nackTried, d.nacks, d.dropped,
		strings.Join(d.history, "; "))
}

// ledger wraps a SubscriberClient and records every delivery the client
// receives and every modack, ack and nack it sends, per ack id. It is the
// model the state machine checks the subscriber against: it sees the wire,
// not the subscriber's own counters.
//
// It checks two rules as events happen and keeps the first violations:
//   - a message is redelivered only after the client gave its previous
//     delivery up (nacked it, or a pipeline stop dropped it untracked):
//     a redelivery of a message the client still held means its lease
//     lapsed (invariants 1 and 6);
//   - no ack id is settled (acked or nacked successfully) twice, and none
//     both acked and nacked (invariant 3).
type ledger struct {
	pubsubpb.SubscriberClient

	mu         sync.Mutex
	byAck      map[string]*delivery
	last       map[string]*delivery // message id → its latest delivery
	all        []*delivery
	violations []violation
}

// violation is a broken rule: kind is stable from run to run (rapid
// shrinks while the failure message stays the same), detail is not.
type violation struct{ kind, detail string }

func newLedger(c pubsubpb.SubscriberClient) *ledger {
	return &ledger{SubscriberClient: c, byAck: map[string]*delivery{}, last: map[string]*delivery{}}
}

func (l *ledger) violate(kind, format string, args ...any) {
	if len(l.violations) < 8 {
		l.violations = append(l.violations, violation{kind, fmt.Sprintf(format, args...)})
	}
}

// Violations returns the violations seen so far.
func (l *ledger) Violations() []violation {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]violation(nil), l.violations...)
}

func (l *ledger) received(resp *pubsubpb.StreamingPullResponse) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rm := range resp.GetReceivedMessages() {
		d := &delivery{ackID: rm.GetAckId(), msgID: rm.GetMessage().GetMessageId(), attempt: rm.GetDeliveryAttempt(), recvAt: now}
		d.note("received")
		if prev := l.last[d.msgID]; prev != nil && !prev.nackTried && !prev.dropped {
			l.violate("a message redelivered while the client held it", "message %s redelivered (attempt %d) at %s while the client held its previous delivery: %v",
				d.msgID, d.attempt, now.Format("04:05.000"), prev)
		}
		l.last[d.msgID] = d
		l.byAck[d.ackID] = d
		l.all = append(l.all, d)
	}
}

func (l *ledger) modack(ids []string, seconds int32, start bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		d := l.byAck[id]
		if d == nil {
			continue
		}
		if start {
			d.touch()
			d.note("modack %ds sent", seconds)
		} else {
			d.note("modack %ds returned %v", seconds, err)
		}
		switch {
		case start && seconds > 0:
			d.tracked = true
		case start:
			d.nackTried = true
		case seconds == 0 && err == nil:
			d.nacks++
			l.checkOnce(d)
		}
	}
}

func (l *ledger) ack(ids []string, start bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		d := l.byAck[id]
		if d == nil {
			continue
		}
		if start {
			d.touch()
			d.note("ack sent")
		} else {
			d.note("ack returned %v", err)
		}
		if start {
			d.ackTried = true
		} else if err == nil {
			d.acks++
			l.checkOnce(d)
		}
	}
}

func (l *ledger) checkOnce(d *delivery) {
	if d.acks+d.nacks > 1 {
		l.violate("an ack id settled twice", "ack id settled more than once: %v", d)
	}
}

// stopped marks every delivery that is neither tracked nor settled as
// possibly dropped by a pipeline stop. Call it after the stop, once the
// receipt modacks of what was tracked have had time to go out.
func (l *ledger) stopped() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.all {
		if !d.tracked && !d.ackTried && !d.nackTried {
			d.dropped = true
			d.note("untracked at a pipeline stop")
		}
	}
}

// unsettled returns the deliveries that were tracked (or not dropped) and
// never settled, oldest first.
func (l *ledger) unsettled() []*delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*delivery
	for _, d := range l.all {
		if !d.settled() && !d.dropped {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].recvAt.Before(out[j].recvAt) })
	return out
}

// ModifyAckDeadline records the modack (tracking) or nack (0 s).
func (l *ledger) ModifyAckDeadline(ctx context.Context, in *pubsubpb.ModifyAckDeadlineRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	l.modack(in.GetAckIds(), in.GetAckDeadlineSeconds(), true, nil)
	out, err := l.SubscriberClient.ModifyAckDeadline(ctx, in, opts...)
	l.modack(in.GetAckIds(), in.GetAckDeadlineSeconds(), false, err)
	return out, err
}

// Acknowledge records the ack.
func (l *ledger) Acknowledge(ctx context.Context, in *pubsubpb.AcknowledgeRequest, opts ...grpc.CallOption) (*emptypb.Empty, error) {
	l.ack(in.GetAckIds(), true, nil)
	out, err := l.SubscriberClient.Acknowledge(ctx, in, opts...)
	l.ack(in.GetAckIds(), false, err)
	return out, err
}

// StreamingPull wraps the stream so that every response is recorded.
func (l *ledger) StreamingPull(ctx context.Context, opts ...grpc.CallOption) (pubsubpb.Subscriber_StreamingPullClient, error) {
	s, err := l.SubscriberClient.StreamingPull(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &ledgerStream{Subscriber_StreamingPullClient: s, l: l, ctx: ctx}, nil
}

type ledgerStream struct {
	pubsubpb.Subscriber_StreamingPullClient
	l   *ledger
	ctx context.Context
}

// teardown is how long a cancelled stream's Recv takes to return, as over a
// real network: it makes a Close that does not wait for its streams return
// while they are still on their way out (invariant 7).
const teardown = 10 * time.Millisecond

func (s *ledgerStream) Recv() (*pubsubpb.StreamingPullResponse, error) {
	resp, err := s.Subscriber_StreamingPullClient.Recv()
	if err == nil {
		s.l.received(resp)
	} else if s.ctx.Err() != nil {
		time.Sleep(teardown)
	}
	// Acks and modacks on the stream would bypass the ledger; the
	// subscriber sends them by unary RPC only (DESIGN: "Acks and modacks by
	// unary RPC"), and invariant 5 checks that stream requests carry none.
	return resp, err
}
