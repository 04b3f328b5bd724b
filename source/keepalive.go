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
// and one receiver at a time), so it also half-closes the stream.
//
// The watchdog counts only time the receiver spends waiting in Recv: while
// the receiver is handing messages to a stalled consumer, an answer may be
// sitting unread in the transport, and the stream is not dead.
//
// The watchdog arms only once the server has shown that it answers
// heartbeats: an empty response after a heartbeat, on this stream or on an
// earlier one of the same Source. Real Pub/Sub answers them; Google's
// emulator never does, and neither would a path through a device that drops
// idle HTTP/2 traffic. Until then a quiet stream is healthy, not dead —
// killing it would only reconnect, log, and lose nothing but the stream.
type keepalive struct {
	s        *Source
	stream   int
	start    time.Time // base of the monotonic offsets below
	interval time.Duration
	timeout  time.Duration

	// Written by the receiver.
	responses atomic.Uint64 // responses received so far
	inRecv    atomic.Int64  // offset+1 since start when the receiver entered Recv; 0 while it is not in Recv
	pending   atomic.Bool   // a watched heartbeat waits for an answer: the receiver pokes wake
	wake      chan struct{} // cap 1

	// Written by the sender: a heartbeat went out on this stream, so an
	// empty response from now on is its answer.
	hbSent atomic.Bool
	// initial is the stream ack deadline the initial request announced;
	// floor is the lowest announced on the stream since (seconds).
	initial int32
	floor   atomic.Int32
}

// newKeepalive watches stream i, opened with stream ack deadline initial.
func newKeepalive(s *Source, i int, initial int32) *keepalive {
	k := &keepalive{
		s:        s,
		stream:   i,
		initial:  initial,
		start:    time.Now(),
		interval: s.cfg.HeartbeatInterval,
		timeout:  s.cfg.HeartbeatTimeout,
		wake:     make(chan struct{}, 1),
	}
	k.floor.Store(initial)
	return k
}

// deadline is the ack deadline a message received on the stream now is
// sure to have on the server: the lowest the stream announced. The server
// may not have applied a later, longer one yet, and a client that assumed
// it would hold messages the server has given out again.
func (k *keepalive) deadline() time.Duration { return time.Duration(k.floor.Load()) * time.Second }

func (k *keepalive) now() time.Duration { return time.Since(k.start) }

// recvStart and recvEnd bracket the receiver's Recv calls.
func (k *keepalive) recvStart() {
	k.inRecv.Store(int64(k.now()) + 1)
	k.poke()
}

// recvEnd takes the response Recv returned (nil with an error). An empty
// response after a heartbeat is the server answering it, which arms the
// watchdog for every later heartbeat of the Source. Responses that carry
// messages prove the stream alive but not that heartbeats are answered, so
// they must not arm it: on a server that never answers, a busy stream that
// goes quiet would be killed.
func (k *keepalive) recvEnd(resp *pubsubpb.StreamingPullResponse) {
	k.inRecv.Store(0)
	if resp != nil && len(resp.GetReceivedMessages()) == 0 && k.hbSent.Load() && !k.s.hbAnswered.Load() {
		k.s.hbAnswered.Store(true)
	}
	k.responses.Add(1) // an error counts too: the stream is ending anyway
	k.poke()
}

// poke wakes the watchdog, but only while it waits for an answer, so a
// busy stream costs no wake-ups between heartbeats.
func (k *keepalive) poke() {
	if !k.pending.Load() {
		return
	}
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// run sends a heartbeat every interval (and at once when the stream ack
// deadline changes) until ctx is done or a send fails, and kills the stream
// through kill when an answer is overdue from a server known to answer.
// Once revoke is closed it half-closes the stream, which the server then
// ends after what it has sent, and kills it if it has not within
// revokeGrace.
func (k *keepalive) run(ctx context.Context, stream pubsubpb.Subscriber_StreamingPullClient, kill context.CancelCauseFunc, revoke <-chan struct{}) {
	r := &kaRun{k: k, stream: stream, hb: time.NewTimer(k.interval), dog: time.NewTimer(k.timeout)}
	r.dog.Stop()
	defer r.hb.Stop()
	defer r.dog.Stop()
	r.sent = k.initial
	changed := k.s.deadlineChanged()
	for {
		select {
		case <-ctx.Done():
			_ = stream.CloseSend()
			return
		case <-revoke:
			_ = stream.CloseSend()
			if !wait(ctx, revokeGrace) {
				return
			}
			kill(errRevoked)
			return
		case <-r.hb.C:
			if !r.heartbeat() {
				return
			}
		case <-changed:
			changed = k.s.deadlineChanged()
			if k.s.deadline.Load() != r.sent && !r.heartbeat() {
				return
			}
		case <-k.wake:
		case <-r.dogC:
			r.dogC = nil
		}
		if r.expired() {
			k.s.cfg.Logger.Debug("pubsubflow: heartbeat not answered; restarting stream", "subscription", k.s.cfg.Subscription, "stream", k.stream, "timeout", k.timeout)
			kill(errHeartbeatTimeout)
			return
		}
	}
}

// kaRun is one stream's keepalive state while run runs.
type kaRun struct {
	k      *keepalive
	stream pubsubpb.Subscriber_StreamingPullClient
	hb     *time.Timer // the next heartbeat
	dog    *time.Timer // the unanswered heartbeat's timeout
	dogC   <-chan time.Time
	sent   int32         // the stream ack deadline the server last heard
	hbAt   time.Duration // when the oldest unanswered heartbeat went out
	seen   uint64        // responses when it went out
}

// heartbeat sends one, with the deadline if it changed; false when the
// stream is gone (Recv reports why).
func (r *kaRun) heartbeat() bool {
	k := r.k
	// Before Send: an answer may arrive before Send returns, and any
	// response after this point proves the stream alive.
	k.hbSent.Store(true)
	if !k.pending.Load() && k.s.hbAnswered.Load() {
		r.hbAt, r.seen = k.now(), k.responses.Load()
		k.pending.Store(true)
	}
	cur := k.s.deadline.Load()
	if cur < k.floor.Load() {
		k.floor.Store(cur) // before Send: the server may apply it at once
	}
	if err := r.stream.Send(heartbeatRequest(cur, r.sent)); err != nil {
		return false
	}
	r.sent = cur
	k.s.emit(event.Event{Kind: event.Heartbeat, Stream: k.stream, Deadline: time.Duration(cur) * time.Second})
	r.hb.Reset(k.interval)
	return true
}

// expired reports whether the unanswered heartbeat's timeout has passed
// while the stream waited in Recv; otherwise it arms the watchdog for
// what is left, or stops it when nothing is pending or Recv is not
// waiting (handing on messages stops the clock until Recv resumes).
func (r *kaRun) expired() bool {
	k := r.k
	if !k.pending.Load() {
		return false
	}
	if k.responses.Load() != r.seen {
		k.pending.Store(false)
		r.stopDog()
		return false
	}
	in := k.inRecv.Load()
	if in == 0 {
		r.stopDog()
		return false
	}
	left := max(r.hbAt, time.Duration(in-1)) + k.timeout - k.now()
	if left <= 0 {
		return true
	}
	r.dog.Reset(left)
	r.dogC = r.dog.C
	return false
}

func (r *kaRun) stopDog() {
	r.dog.Stop()
	r.dogC = nil
}
