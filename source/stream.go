package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/event"
)

// errStreamDone cancels a stream's context once its receiver has returned.
var errStreamDone = errors.New("pubsubflow/source: stream done")

// lastOpenGrace is how long the attempt made when ReconnectTimeout runs
// out may take to open: the source ends at most this long after it.
const lastOpenGrace = time.Second

// errOpenTimedOut cancels a stream still opening when ReconnectTimeout
// has run out.
var errOpenTimedOut = errors.New("no answer before ReconnectTimeout ran out")

// runStream is stream i's restart loop. It wraps only the gRPC stream:
// each pass opens one stream, receives until it fails, and then either
// waits a backoff delay and opens the next, or ends the source. Only a
// healthy stream (see healthyAfter) resets the backoff and the
// ReconnectTimeout count. It returns nil when ctx is done (a shutdown is
// not a failure).
func (s *Source) runStream(ctx context.Context, i int, h *handoff) error {
	delays := newDelays(s.cfg.Backoff)
	gu := newGiveUp(s.cfg.ReconnectTimeout)
	attempt := 0
	var prev error // the previous failure in this run of failures
	lane := int(laneIDs.Add(1))
	defer s.closeLane(lane) // a lane still waiting to open waits no more
	for {
		waitStart := time.Now()
		revoked := make(chan struct{})
		maxMsgs, maxBytes, ok := s.grant(ctx, i, lane, sync.OnceFunc(func() { close(revoked) }))
		if !ok {
			return nil
		}
		gu.waited(time.Since(waitStart)) // waiting for room is not failing
		healthy, err := s.connectOnce(ctx, i, lane, h, maxMsgs, maxBytes, gu.deadline(), revoked)
		s.closeLane(lane)
		if ended(ctx) {
			return nil
		}
		if healthy || err == errRevoked {
			delays.reset()
			attempt, prev = 0, nil
		}
		if err == errRevoked {
			continue // its grant was shared out: open again, no failure
		}
		attempt++
		if !s.cfg.Classify(failure(err, attempt, prev)) {
			return s.terminal(i, err)
		}
		if gerr := gu.failed(healthy, err); gerr != nil {
			return s.terminal(i, gerr)
		}
		prev = err
		d := delays.next()
		if end := gu.deadline(); !end.IsZero() {
			d = min(d, max(time.Until(end), 0)) // the last attempt is due at the deadline
		}
		s.emit(event.Event{Kind: event.Reconnect, Stream: i, Delay: d, Err: err})
		if !waitOn(ctx, nil, d) {
			return nil
		}
	}
}

// terminal ends the source: the error names the subscription and wraps the
// stream's error (an *UnreachableError stays one), so errors.As and
// status.Code still work on it.
func (s *Source) terminal(i int, err error) error {
	if ue, ok := err.(*UnreachableError); ok {
		ue.Last = explain(ue.Last)
	} else {
		err = explain(err)
	}
	err = fmt.Errorf("pubsubflow/source: subscription %s: %w", s.cfg.Subscription, err)
	s.emit(event.Event{Kind: event.Terminal, Stream: i, Err: err})
	return err
}

// connectOnce opens one stream with the given flow-control limits and
// receives until it fails or ctx is done. healthy reports whether the
// stream delivered a message or stayed open healthyAfter. A stream whose
// grant was revoked ends with errRevoked, however the server ended it.
func (s *Source) connectOnce(ctx context.Context, i, lane int, h *handoff, maxMsgs, maxBytes int64, giveUp time.Time, revoked <-chan struct{}) (healthy bool, err error) {
	sctx, cancel := context.WithCancelCause(withRouting(ctx, "subscription", s.cfg.Subscription))
	defer cancel(errStreamDone)
	req := s.initialRequest(maxMsgs, maxBytes)
	stream, err := s.open(sctx, cancel, req, giveUp)
	if err != nil {
		if !ended(ctx) {
			s.emit(event.Event{Kind: event.ConnectFailed, Stream: i, Err: err})
		}
		return false, err
	}
	s.emit(event.Event{Kind: event.Connect, Stream: i})
	opened := time.Now()
	ka := newKeepalive(s, i, req.StreamAckDeadlineSeconds)
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		ka.run(sctx, stream, cancel, revoked)
	}()
	delivered, err := s.receive(ctx, stream, ka, i, lane, h)
	healthy = delivered || time.Since(opened) >= healthyAfter
	cancel(errStreamDone)
	<-kaDone
	switch {
	case isClosed(revoked):
		err = errRevoked
	case errors.Is(context.Cause(sctx), errHeartbeatTimeout):
		err = status.Errorf(codes.DeadlineExceeded, "no response within %v after a heartbeat: %v", s.cfg.HeartbeatTimeout, errHeartbeatTimeout)
	}
	if !ended(ctx) && err != errRevoked { // a revoke is no fault: no warning
		s.emit(event.Event{Kind: event.Disconnect, Stream: i, Err: err})
	}
	return healthy, err
}

// open opens a stream and sends req on it. Opening is bounded by giveUp
// (zero: no bound), when the run of failures reaches ReconnectTimeout, so
// an endpoint that never answers (gRPC's connect timeout is 20 s) ends the
// source on time.
func (s *Source) open(ctx context.Context, cancel context.CancelCauseFunc, req *pubsubpb.StreamingPullRequest, giveUp time.Time) (pubsubpb.Subscriber_StreamingPullClient, error) {
	var bound *time.Timer
	if !giveUp.IsZero() {
		// The last attempt, due at the deadline, gets a moment to open.
		bound = time.AfterFunc(max(time.Until(giveUp), lastOpenGrace), func() { cancel(errOpenTimedOut) })
	}
	stream, err := s.client.StreamingPull(ctx)
	if err == nil {
		err = stream.Send(req)
		if errors.Is(err, io.EOF) {
			// Send reports only that the stream is gone; Recv has the status.
			_, err = stream.Recv()
			err = serverOrigin(stream, err)
		}
	}
	if bound != nil && !bound.Stop() {
		err = status.Errorf(codes.DeadlineExceeded, "opening the stream: %v", errOpenTimedOut)
	}
	return stream, err
}

// receive reads responses until the stream fails, each only once there is
// room (waitRoom), so a spent budget stops the reads and then the server.
// A response's messages go through the screening and the receipt steps on
// this goroutine, before any of them is queued. delivered reports whether
// a response carried a message that passed the screening.
func (s *Source) receive(ctx context.Context, stream pubsubpb.Subscriber_StreamingPullClient, ka *keepalive, i, lane int, h *handoff) (delivered bool, err error) {
	var sc screen
	for {
		if !s.waitRoom(ctx, lane, h) {
			return delivered, ctx.Err()
		}
		ka.recvStart()
		resp, err := stream.Recv()
		ka.recvEnd(resp)
		if err != nil {
			return delivered, serverOrigin(stream, err)
		}
		if p := resp.GetSubscriptionProperties(); p != nil {
			s.props.Store(p)
		}
		rms := s.refuseMalformed(i, resp.GetReceivedMessages(), &sc)
		if len(rms) == 0 {
			continue // a heartbeat answer or a confirmation
		}
		delivered = true
		if batch := s.receipt(lane, rms, ka.deadline()); len(batch) > 0 {
			h.push(batch)
		}
	}
}

// waitOn waits for ch (nil: never), at most d (negative: no bound); false
// when ctx is done first.
func waitOn(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	var timeout <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ch:
	case <-timeout:
	case <-ctx.Done():
		return false
	}
	return true
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// ended reports whether ctx is done or its deadline has passed: gRPC fails
// a call at the deadline by the clock, maybe just before ctx is marked
// done, and the run's own end is not a stream failure.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
