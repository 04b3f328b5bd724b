package source

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

// errHeartbeatTimeout is the cause with which the watchdog cancels a
// stream whose server stayed silent after a heartbeat.
var errHeartbeatTimeout = errors.New("pubsubflow/source: heartbeat not answered")

// keepalive sends one stream's heartbeats and runs its watchdog. It is the
// stream's only sender after the initial request (gRPC allows one sender
// at a time), so it also half-closes the stream.
//
// The watchdog counts only time the receiver spends waiting in Recv: while
// the receiver hands messages to a stalled consumer, an answer may sit
// unread in the transport. It arms only once the server has answered a
// heartbeat on this or an earlier stream of the Source: Google's emulator
// never does, and there a quiet stream is healthy.
type keepalive struct {
	s      *Source
	stream int
	start  time.Time // base of the monotonic offsets below

	// Written by the receiver.
	responses atomic.Uint64 // responses received so far
	inRecv    atomic.Int64  // offset+1 since start when the receiver entered Recv; 0 outside Recv

	// Written by the sender: hbSent once a heartbeat went out, so an empty
	// response from then on is its answer; floor is the lowest stream ack
	// deadline announced on the stream (seconds).
	hbSent atomic.Bool
	floor  atomic.Int32

	// The sender's own.
	hb, dog *time.Timer   // the next heartbeat; the watched one's timeout
	sent    int32         // the stream ack deadline the server last heard
	pending bool          // a watched heartbeat waits for an answer
	hbAt    time.Duration // when it went out
	seen    uint64        // responses when it went out
}

// newKeepalive watches stream i, opened with stream ack deadline initial.
func newKeepalive(s *Source, i int, initial int32) *keepalive {
	k := &keepalive{s: s, stream: i, start: time.Now(), sent: initial}
	k.floor.Store(initial)
	return k
}

// deadline is the ack deadline a message received on the stream now is
// sure to have on the server: the lowest the stream announced, since the
// server may not have applied a later, longer one yet.
func (k *keepalive) deadline() time.Duration { return time.Duration(k.floor.Load()) * time.Second }

func (k *keepalive) now() time.Duration { return time.Since(k.start) }

// recvStart and recvEnd bracket the receiver's Recv calls.
func (k *keepalive) recvStart() { k.inRecv.Store(int64(k.now()) + 1) }

// recvEnd takes the response Recv returned (nil with an error). Only an
// empty response after a heartbeat arms the watchdog: one with messages
// does not prove heartbeats are answered.
func (k *keepalive) recvEnd(resp *pubsubpb.StreamingPullResponse) {
	k.inRecv.Store(0)
	if resp != nil && len(resp.GetReceivedMessages()) == 0 && k.hbSent.Load() && !k.s.hbAnswered.Load() {
		k.s.hbAnswered.Store(true)
	}
	k.responses.Add(1) // an error counts too: the stream is ending anyway
}

// run sends a heartbeat every interval (and at once when the stream ack
// deadline changes) until ctx is done or a send fails, and kills the stream
// when an answer is overdue. Once revoked is closed it half-closes the
// stream and kills it if the server has not ended it within revokeGrace.
func (k *keepalive) run(ctx context.Context, stream pubsubpb.Subscriber_StreamingPullClient, kill context.CancelCauseFunc, revoked <-chan struct{}) {
	k.hb, k.dog = time.NewTimer(k.s.cfg.HeartbeatInterval), time.NewTimer(k.s.cfg.HeartbeatTimeout)
	k.dog.Stop()
	defer k.hb.Stop()
	defer k.dog.Stop()
	changed := k.s.deadlineChanged()
	for {
		select {
		case <-ctx.Done():
			_ = stream.CloseSend()
			return
		case <-revoked:
			_ = stream.CloseSend()
			if waitOn(ctx, nil, revokeGrace) {
				kill(errRevoked)
			}
			return
		case <-k.hb.C:
			if !k.heartbeat(stream) {
				return
			}
		case <-changed:
			changed = k.s.deadlineChanged()
			if k.s.deadline.Load() != k.sent && !k.heartbeat(stream) {
				return
			}
		case <-k.dog.C:
			if k.overdue() {
				k.s.log.Debug("pubsubflow: heartbeat not answered; restarting stream", "subscription", k.s.cfg.Subscription, "stream", k.stream, "timeout", k.s.cfg.HeartbeatTimeout)
				kill(errHeartbeatTimeout)
				return
			}
		}
	}
}

// heartbeat sends one, with the deadline if it changed; false when the
// stream is gone (Recv reports why).
func (k *keepalive) heartbeat(stream pubsubpb.Subscriber_StreamingPullClient) bool {
	// Before Send: an answer may arrive before Send returns.
	k.hbSent.Store(true)
	if k.pending && k.responses.Load() != k.seen {
		k.pending = false // answered
	}
	if !k.pending && k.s.hbAnswered.Load() {
		k.pending, k.hbAt, k.seen = true, k.now(), k.responses.Load()
		k.dog.Reset(k.s.cfg.HeartbeatTimeout)
	}
	cur := k.s.deadline.Load()
	if cur < k.floor.Load() {
		k.floor.Store(cur) // before Send: the server may apply it at once
	}
	if err := stream.Send(heartbeatRequest(cur, k.sent)); err != nil {
		return false
	}
	k.sent = cur
	k.s.emit(event.Event{Kind: event.Heartbeat, Stream: k.stream, Deadline: time.Duration(cur) * time.Second})
	k.hb.Reset(k.s.cfg.HeartbeatInterval)
	return true
}

// overdue reports, when the watchdog fires, whether the watched
// heartbeat's timeout has passed while the stream waited in Recv; if not,
// it re-arms the watchdog for what is left (time outside Recv, handing on
// messages, does not count).
func (k *keepalive) overdue() bool {
	if !k.pending || k.responses.Load() != k.seen {
		k.pending = false
		return false
	}
	left := k.s.cfg.HeartbeatTimeout
	if in := k.inRecv.Load(); in != 0 {
		left = max(k.hbAt, time.Duration(in-1)) + k.s.cfg.HeartbeatTimeout - k.now()
		if left <= 0 {
			return true
		}
	}
	k.dog.Reset(left)
	return false
}
