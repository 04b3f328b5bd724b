package pubsubtest

import (
	"errors"
	"io"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// stream is one open (or finished) StreamingPull call.
type stream struct {
	id          int64
	sub         *subscription
	info        StreamInfo
	ackDeadline time.Duration
	maxMsgs     int64 // ≤ 0: no limit
	maxBytes    int64 // ≤ 0: no limit
	outMsgs     int64 // delivered on this stream and not yet settled
	outBytes    int64
	stalled     bool
	hbPending   bool        // a heartbeat waits for its answer
	hbTimer     *time.Timer // delays the answer (WithHeartbeatDelay)
	ackConf     *pubsubpb.StreamingPullResponse_AcknowledgeConfirmation
	modConf     *pubsubpb.StreamingPullResponse_ModifyAckDeadlineConfirmation
	requests    []*pubsubpb.StreamingPullRequest // with WithRecordStreamRequests

	finished bool
	err      error         // final status, set before doneCh closes
	wakeCh   chan struct{} // cap 1: something may be ready to send
	doneCh   chan struct{} // closed when the stream must end
}

func (st *stream) wake() {
	select {
	case st.wakeCh <- struct{}{}:
	default:
	}
}

// atLimit reports whether server-side flow control forbids another message.
func (st *stream) atLimit() bool {
	return st.maxMsgs > 0 && st.outMsgs >= st.maxMsgs || st.maxBytes > 0 && st.outBytes >= st.maxBytes
}

// admits reports whether server-side flow control lets a message of size
// bytes go out now: under the message limit, and within the byte limit
// (a message larger than the limit goes alone, when nothing is out), so a
// client's byte budget holds exactly.
func (st *stream) admits(size int64) bool {
	if st.maxMsgs > 0 && st.outMsgs >= st.maxMsgs {
		return false
	}
	return st.maxBytes <= 0 || st.outMsgs == 0 || st.outBytes+size <= st.maxBytes
}

// StreamingPull implements pubsubpb.SubscriberServer. The first request
// must name an existing subscription and carry the stream ack deadline;
// later requests may only carry acks, modacks and a new stream ack
// deadline. Messages go out in batches while the stream is under its
// max_outstanding_messages / max_outstanding_bytes limits (≤ 0: none).
func (s *rpcServer) StreamingPull(ss pubsubpb.Subscriber_StreamingPullServer) error {
	req, err := ss.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return invalidArg("The stream closed before its initial request.")
		}
		return err
	}
	st, err := s.openStream(req)
	if err != nil {
		return err
	}
	s.wg.Add(1) // before Close's Wait: Close stops gRPC, which waits for this handler, first
	go s.recvLoop(ss, st)
	err = s.sendLoop(ss, st)
	s.mu.Lock()
	s.finishLocked(st, err)
	s.mu.Unlock()
	return err
}

func (s *Server) checkModacks(req *pubsubpb.StreamingPullRequest) error {
	if len(req.ModifyDeadlineSeconds) != len(req.ModifyDeadlineAckIds) {
		return invalidArg("modify_deadline_seconds and modify_deadline_ack_ids must have the same length (%d != %d).", len(req.ModifyDeadlineSeconds), len(req.ModifyDeadlineAckIds))
	}
	for _, d := range req.ModifyDeadlineSeconds {
		if d < 0 || d > 600 {
			return invalidArg("Invalid ack deadline given: %d seconds; it must be between 0 and 600.", d)
		}
	}
	return nil
}

// openStream checks the initial request of a StreamingPull and opens its
// stream, applying the acks and modacks the request carries.
func (s *Server) openStream(req *pubsubpb.StreamingPullRequest) (*stream, error) {
	size := proto.Size(req)
	if req.Subscription == "" {
		return nil, invalidArg("The initial request must name a subscription.")
	}
	if err := checkName(limits.Subscriptions, req.Subscription); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methodLocked(methodStreamingPull).noteRequest(size)
	sub, err := s.streamSubLocked(req)
	if err != nil {
		return nil, err
	}
	s.nextStream++
	st := newStream(s.nextStream, sub, req, s.stallAll)
	if s.cfg.recordRequests {
		st.requests = append(st.requests, req)
	}
	s.streams = append(s.streams, st)
	sub.streams[st] = struct{}{}
	sub.stats.Streams++
	s.applyStreamAcksLocked(st, req, now)
	st.wake()
	return st, nil
}

// streamSubLocked returns the subscription an initial request opens a
// stream on, or the error the service answers: the subscription missing
// or detached, or the request's deadlines invalid (counted as rejected).
func (s *Server) streamSubLocked(req *pubsubpb.StreamingPullRequest) (*subscription, error) {
	sub := s.subs[req.Subscription]
	if sub == nil {
		return nil, status.Errorf(codes.NotFound, "Subscription does not exist (resource=%s).", req.Subscription)
	}
	if sub.pb.Detached {
		return nil, status.Errorf(codes.FailedPrecondition, "Subscription is detached (resource=%s).", req.Subscription)
	}
	err := s.checkAckDeadline(req.StreamAckDeadlineSeconds)
	if err == nil {
		err = s.checkModacks(req)
	}
	if err != nil {
		sub.stats.RejectedRequests++
		return nil, err
	}
	return sub, nil
}

// newStream is stream id of sub as its initial request asks; stalled is
// whether it starts stalled (StallStreams without ids covers streams
// opened later).
func newStream(id int64, sub *subscription, req *pubsubpb.StreamingPullRequest, stalled bool) *stream {
	deadline := time.Duration(req.StreamAckDeadlineSeconds) * time.Second
	return &stream{
		id:          id,
		sub:         sub,
		ackDeadline: deadline,
		maxMsgs:     req.MaxOutstandingMessages,
		maxBytes:    req.MaxOutstandingBytes,
		wakeCh:      make(chan struct{}, 1),
		doneCh:      make(chan struct{}),
		info: StreamInfo{
			ID:                     id,
			Subscription:           sub.name,
			ClientID:               req.ClientId,
			MaxOutstandingMessages: req.MaxOutstandingMessages,
			MaxOutstandingBytes:    req.MaxOutstandingBytes,
			ProtocolVersion:        req.ProtocolVersion,
			InitialAckDeadline:     deadline,
			AckDeadline:            deadline,
			Requests:               1,
			Open:                   true,
			Stalled:                stalled,
		},
	}
}

// recvLoop reads the requests after the first one. It ends when the call
// does (the stream context is cancelled once the handler has returned).
func (s *Server) recvLoop(ss pubsubpb.Subscriber_StreamingPullServer, st *stream) {
	defer s.wg.Done()
	for {
		req, err := ss.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil // the client half-closed: end the call with OK
			}
			s.mu.Lock()
			s.finishLocked(st, err)
			s.mu.Unlock()
			return
		}
		if !s.handleStreamRequest(st, req) {
			return
		}
	}
}

// checkLaterRequest applies the real service's rule that only the first
// request of a stream carries the stream's settings.
func (s *Server) checkLaterRequest(req *pubsubpb.StreamingPullRequest) error {
	if req.Subscription != "" || req.ClientId != "" || req.MaxOutstandingMessages != 0 ||
		req.MaxOutstandingBytes != 0 || req.ProtocolVersion != 0 {
		return status.Error(codes.InvalidArgument, msgInitialOnly)
	}
	if err := s.checkModacks(req); err != nil {
		return err
	}
	if req.StreamAckDeadlineSeconds != 0 {
		return s.checkAckDeadline(req.StreamAckDeadlineSeconds)
	}
	return nil
}

// handleStreamRequest applies one later request; it reports false once the
// stream is finished.
func (s *Server) handleStreamRequest(st *stream, req *pubsubpb.StreamingPullRequest) bool {
	size := proto.Size(req)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.finished {
		return false
	}
	s.methodLocked(methodStreamingPull).noteRequest(size)
	st.info.Requests++
	if s.cfg.recordRequests {
		st.requests = append(st.requests, req)
	}
	if err := s.checkLaterRequest(req); err != nil {
		st.sub.stats.RejectedRequests++
		st.info.Rejected++
		s.finishLocked(st, err)
		return false
	}
	if req.StreamAckDeadlineSeconds != 0 {
		st.ackDeadline = time.Duration(req.StreamAckDeadlineSeconds) * time.Second
		st.info.AckDeadline = st.ackDeadline
	}
	if len(req.AckIds) == 0 && len(req.ModifyDeadlineAckIds) == 0 {
		st.info.Heartbeats++
		if st.info.ProtocolVersion >= 1 && !s.cfg.silentHeartbeats {
			s.answerHeartbeatLocked(st)
		}
		return true
	}
	s.applyStreamAcksLocked(st, req, now)
	return true
}

// answerHeartbeatLocked has the sender answer a heartbeat, now or after the
// heartbeat delay. The timer callback takes s.mu only briefly; the timer
// is stopped when the stream ends.
func (s *Server) answerHeartbeatLocked(st *stream) {
	d := s.cfg.heartbeatDelay
	if d <= 0 {
		st.hbPending = true
		st.wake()
		return
	}
	if st.hbTimer != nil {
		return // an answer is already due
	}
	st.hbTimer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		st.hbTimer = nil
		if !st.finished {
			st.hbPending = true
			st.wake()
		}
	})
}

// applyStreamAcksLocked applies the acks and modacks of a stream request;
// on an exactly-once subscription the next response confirms them.
func (s *Server) applyStreamAcksLocked(st *stream, req *pubsubpb.StreamingPullRequest, now time.Time) {
	for _, id := range req.AckIds {
		s.applyStreamAckLocked(st.sub, id, s.ackLocked, st.ackLists)
	}
	for i, id := range req.ModifyDeadlineAckIds {
		secs := req.ModifyDeadlineSeconds[i]
		modack := func(sub *subscription, id string) bool { return s.modackLocked(sub, id, secs, now) }
		s.applyStreamAckLocked(st.sub, id, modack, st.modLists)
	}
	if st.ackConf != nil || st.modConf != nil {
		st.wake()
	}
}

// applyStreamAckLocked applies one ack id of a stream request, an injected
// ack fault first, and on an exactly-once subscription files it in the
// confirmation lists that lists returns.
func (s *Server) applyStreamAckLocked(sub *subscription, id string, apply func(*subscription, string) bool, lists func() confLists) {
	reason := s.ackFaultLocked(sub)
	ok := reason == "" && apply(sub, id)
	if !sub.exactlyOnce() {
		return
	}
	c := lists()
	l := c.invalid
	switch {
	case ok:
		l = c.ok
	case reason == reasonTransientUnordered && c.unordered != nil:
		l = c.unordered
	case reason != "" && reason != reasonInvalidAckID:
		l = c.temporary
	}
	*l = append(*l, id)
}

// confLists are the ack id lists of a confirmation in a StreamingPull
// response, by outcome.
type confLists struct {
	ok, unordered, temporary, invalid *[]string
}

// ackLists are the lists of the stream's next acknowledge confirmation.
func (st *stream) ackLists() confLists {
	if st.ackConf == nil {
		st.ackConf = &pubsubpb.StreamingPullResponse_AcknowledgeConfirmation{}
	}
	c := st.ackConf
	return confLists{ok: &c.AckIds, unordered: &c.UnorderedAckIds, temporary: &c.TemporaryFailedAckIds, invalid: &c.InvalidAckIds}
}

// modLists are the lists of the stream's next modack confirmation, which
// has no list of unordered ack ids: that transient failure is filed as
// temporary.
func (st *stream) modLists() confLists {
	if st.modConf == nil {
		st.modConf = &pubsubpb.StreamingPullResponse_ModifyAckDeadlineConfirmation{}
	}
	c := st.modConf
	return confLists{ok: &c.AckIds, temporary: &c.TemporaryFailedAckIds, invalid: &c.InvalidAckIds}
}

// sendLoop runs on the handler goroutine: it sends whatever nextResponse
// builds and otherwise waits for a wake-up, without holding s.mu.
func (s *Server) sendLoop(ss pubsubpb.Subscriber_StreamingPullServer, st *stream) error {
	ctx := ss.Context()
	for {
		resp, done, err := s.nextResponse(st)
		if done {
			return err
		}
		if resp != nil {
			if err := ss.Send(resp); err != nil {
				return err
			}
			continue
		}
		select {
		case <-st.wakeCh:
		case <-st.doneCh:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// nextResponse takes up to the per-response maximum of ready messages that
// flow control allows, plus a pending heartbeat answer or exactly-once
// confirmations. It returns nil when there is nothing to send (or the
// stream is stalled) and done once the stream must end.
func (s *Server) nextResponse(st *stream) (resp *pubsubpb.StreamingPullResponse, done bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.finished {
		return nil, true, st.err
	}
	if st.stalled || s.stallAll {
		return nil, false, nil
	}
	sub := st.sub
	var msgs []*pubsubpb.ReceivedMessage
	if n := sub.ready.Len(); n > 0 && !st.atLimit() {
		msgs = make([]*pubsubpb.ReceivedMessage, 0, min(n, s.cfg.maxPerResponse))
		now := time.Now()
		budget := int64(maxResponseBytes)
		stale := retentionCutoff(sub, now)
		for sub.ready.Len() > 0 && len(msgs) < s.cfg.maxPerResponse && st.admits(sub.ready.Front().msg.size) {
			e := sub.ready.Front()
			if s.dropStaleLocked(e, stale) {
				sub.ready.Pop()
				continue
			}
			size := e.msg.size + 32 // ack id and framing
			if len(msgs) > 0 && size > budget {
				break
			}
			budget -= size
			sub.ready.Pop()
			msgs = append(msgs, s.deliverLocked(e, st, st.ackDeadline, now))
		}
	}
	if len(msgs) == 0 && !st.hbPending && st.ackConf == nil && st.modConf == nil {
		return nil, false, nil
	}
	resp = &pubsubpb.StreamingPullResponse{
		ReceivedMessages:              msgs,
		AcknowledgeConfirmation:       st.ackConf,
		ModifyAckDeadlineConfirmation: st.modConf,
		SubscriptionProperties:        sub.props,
	}
	if st.hbPending && len(msgs) == 0 {
		st.info.HeartbeatReplies++
	}
	st.hbPending, st.ackConf, st.modConf = false, nil, nil
	st.info.Responses++
	return resp, false, nil
}

// finishLocked makes the stream end with err (nil: OK) unless it already
// has; the handler returns err to the client.
func (s *Server) finishLocked(st *stream, err error) {
	if st.finished {
		return
	}
	st.finished = true
	st.err = err
	st.info.Open = false
	st.info.Code = status.Code(err)
	if err != nil {
		st.info.Err = err.Error()
	}
	if st.hbTimer != nil {
		st.hbTimer.Stop()
		st.hbTimer = nil
	}
	delete(st.sub.streams, st)
	close(st.doneCh)
}
