package source

import (
	"context"
	"errors"
	"fmt"
	"io"
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
// healthy stream (see healthyAfter) resets the backoff and restarts the
// ReconnectTimeout count: a server that accepts each stream and drops it
// at once gets reconnects ever further apart, and then the
// *UnreachableError. It returns nil when ctx is done (a shutdown is not a
// failure).
func (s *Source) runStream(ctx context.Context, i int, h *handoff) error {
	delays := newDelays(s.cfg.Backoff)
	gu := newGiveUp(s.cfg.ReconnectTimeout)
	attempt := 0
	var prev error // the previous failure in this run of failures
	lane := int(laneIDs.Add(1))
	defer s.closeLane(lane) // a lane still waiting to open waits no more
	for {
		waitStart := time.Now()
		rv := newRevocation()
		maxMsgs, maxBytes, ok := s.grant(ctx, i, lane, rv)
		if !ok {
			return nil
		}
		gu.waited(time.Since(waitStart)) // waiting for room is not failing
		healthy, err := s.connectOnce(ctx, i, lane, h, maxMsgs, maxBytes, gu.deadline(), rv)
		s.closeLane(lane)
		if ended(ctx) {
			return nil
		}
		if errors.Is(err, errRevoked) {
			delays.reset() // its grant was shared out: open again, no failure
			attempt, prev = 0, nil
			continue
		}
		if healthy {
			delays.reset()
			attempt, prev = 0, nil
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
		if !wait(ctx, d) {
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

// grant returns the flow-control limits stream i's next stream asks for
// on lane: its share of the limits, or with a Budget what the Budget
// grants, once it grants anything (a wait for room is no failure: no
// backoff); the Budgets may fire rv to revoke the grant. ok is false when
// ctx ended first.
func (s *Source) grant(ctx context.Context, i, lane int, rv *revocation) (maxMsgs, maxBytes int64, ok bool) {
	maxMsgs, maxBytes = share(s.cfg.MaxOutstandingMessages, i, s.cfg.Streams), share(s.cfg.MaxOutstandingBytes, i, s.cfg.Streams)
	if len(s.flows) == 0 {
		return maxMsgs, maxBytes, ctx.Err() == nil
	}
	return s.openLane(ctx, lane, maxMsgs, maxBytes, rv)
}

// connectOnce opens one stream with the given flow-control limits, sends
// its initial request, and receives until the stream fails or ctx is done.
// healthy reports whether the stream delivered a message or stayed open
// healthyAfter. A stream whose grant rv revoked ends with errRevoked,
// however the server ended it.
//
// Opening is bounded by giveUp (zero: no bound), the moment the run of
// failures reaches ReconnectTimeout: an endpoint that never answers
// (gRPC's connect timeout is 20 s) ends the source on time.
func (s *Source) connectOnce(ctx context.Context, i, lane int, h *handoff, maxMsgs, maxBytes int64, giveUp time.Time, rv *revocation) (healthy bool, err error) {
	sctx, cancel := context.WithCancelCause(withRouting(ctx, "subscription", s.cfg.Subscription))
	defer cancel(errStreamDone)
	var bound *time.Timer
	if !giveUp.IsZero() {
		// An attempt that starts at the deadline (the last one) gets a
		// moment to open.
		bound = time.AfterFunc(max(time.Until(giveUp), lastOpenGrace), func() { cancel(errOpenTimedOut) })
	}
	stream, err := s.client.StreamingPull(sctx)
	req := s.initialRequest(maxMsgs, maxBytes)
	if err == nil {
		err = stream.Send(req)
		if errors.Is(err, io.EOF) {
			// Send reports only that the stream is gone; Recv has the status.
			_, err = stream.Recv()
			err = serverOrigin(stream, err)
		}
	}
	if bound != nil && !bound.Stop() {
		// The timer fired (or is about to cancel): the stream is gone.
		err = status.Errorf(codes.DeadlineExceeded, "opening the stream: %v", errOpenTimedOut)
	}
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
		ka.run(sctx, stream, cancel, rv.ch)
	}()
	delivered, err := s.receive(ctx, stream, ka, i, lane, h)
	healthy = delivered || time.Since(opened) >= healthyAfter
	cancel(errStreamDone)
	<-kaDone
	switch {
	case rv.fired():
		err = errRevoked
	case errors.Is(context.Cause(sctx), errHeartbeatTimeout):
		err = status.Errorf(codes.DeadlineExceeded, "no response within %v after a heartbeat: %v", s.cfg.HeartbeatTimeout, errHeartbeatTimeout)
	}
	if !ended(ctx) && err != errRevoked { // a revoke is no fault: no warning
		s.emit(event.Event{Kind: event.Disconnect, Stream: i, Err: err})
	}
	return healthy, err
}

// receive reads responses until the stream fails. Before each Recv it
// waits for room — the Budget's, or without one for the previous
// responses to be handed on — so a spent budget stops the reads, which
// stops the HTTP/2 window and then the server. A response's messages are
// decoded and go through the receipt steps together, on this goroutine,
// before any of them is queued: no message waits anywhere unleased or
// uncounted. The watchdog does not count the time spent waiting for room.
// delivered reports whether a response carried a message that passed the
// screening; empty responses (heartbeat answers, confirmations) do not
// make a stream healthy.
func (s *Source) receive(ctx context.Context, stream pubsubpb.Subscriber_StreamingPullClient, ka *keepalive, i, lane int, h *handoff) (delivered bool, err error) {
	var sc screen // kinds already logged on this stream, and its screening scratch
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
		rms := resp.GetReceivedMessages()
		rms = s.refuseMalformed(i, rms, &sc)
		if len(rms) == 0 {
			continue // a heartbeat answer or a confirmation
		}
		delivered = true
		if batch := s.receipt(lane, rms, ka.deadline()); len(batch) > 0 {
			h.push(batch)
		}
	}
}

// waitRoom waits until this stream may read another response; false when
// ctx is done first.
func (s *Source) waitRoom(ctx context.Context, lane int, h *handoff) bool {
	for {
		if len(s.flows) > 0 {
			return s.waitBudgets(ctx, lane)
		}
		ch := h.drained()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// waitOn waits for ch, at most d; false when ctx is done first.
func waitOn(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// ended reports whether ctx is done or its deadline has passed: gRPC
// fails a call at the deadline by the clock, which may be just before
// ctx's own timer marks it done, and the run's own end is not a stream
// failure (no ConnectFailed, no Reconnect).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// wait waits d or until ctx is done; it reports whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
