package pubsubtest

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const methodStreamingPull = "StreamingPull"

// methodState holds the counters and the injected faults of one RPC method.
type methodState struct {
	stats   MethodStats
	failN   int
	failSt  *status.Status
	latency time.Duration

	// stallEvery > 0 holds back the answer of every stallEvery-th call
	// (counted by stallSeen since StallEvery) for stallFor.
	stallEvery int
	stallSeen  int
	stallFor   time.Duration
}

func (m *methodState) noteRequest(size int) {
	m.stats.Requests++
	if size > m.stats.MaxRequestBytes {
		m.stats.MaxRequestBytes = size
	}
}

// methodLocked returns the state of a method by short name ("Acknowledge").
func (s *Server) methodLocked(name string) *methodState {
	m := s.methods[name]
	if m == nil {
		m = &methodState{}
		s.methods[name] = m
	}
	return m
}

func shortMethod(full string) string {
	return full[strings.LastIndexByte(full, '/')+1:]
}

// callFaults are the faults injected into one call: the latency to add
// before it runs, the error to fail with instead (nil: none), and how long
// to hold back its answer after it ran.
type callFaults struct {
	latency time.Duration
	fail    error
	stall   time.Duration
}

// beginCall counts a call and takes the faults injected for it.
func (s *Server) beginCall(method string) callFaults {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.methodLocked(method)
	m.stats.Calls++
	f := callFaults{latency: m.latency}
	if m.failN > 0 {
		m.failN--
		m.stats.Injected++
		f.fail = m.failSt.Err()
	}
	if m.stallEvery > 0 {
		m.stallSeen++
		if m.stallSeen%m.stallEvery == 0 {
			m.stats.Stalled++
			f.stall = m.stallFor
		}
	}
	return f
}

func (s *Server) endCall(method string, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methodLocked(method).stats.Errors++
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := shortMethod(info.FullMethod)
	if m, ok := req.(proto.Message); ok {
		size := proto.Size(m)
		s.mu.Lock()
		s.methodLocked(method).noteRequest(size)
		s.mu.Unlock()
	}
	resp, err := s.runCall(ctx, method, func() (any, error) { return handler(ctx, req) })
	s.endCall(method, err)
	return resp, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := shortMethod(info.FullMethod)
	_, err := s.runCall(ss.Context(), method, func() (any, error) { return nil, handler(srv, ss) })
	s.endCall(method, err)
	return err
}

// runCall applies the injected latency, then the injected failure, then
// runs the call and holds back its answer when it is stalled.
func (s *Server) runCall(ctx context.Context, method string, call func() (any, error)) (any, error) {
	f := s.beginCall(method)
	if err := s.pause(ctx, f.latency); err != nil {
		return nil, err
	}
	if f.fail != nil {
		return nil, f.fail
	}
	resp, err := call()
	if err := s.pause(ctx, f.stall); err != nil {
		return nil, err // the call's effect stays, as when a reply is lost
	}
	return resp, err
}

// pause waits d (nothing for d ≤ 0) and returns the status to end the
// call with when the caller cancelled or the server closed first.
func (s *Server) pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	switch err := s.waitDone(ctx, d); {
	case err == errClosed:
		return status.Error(codes.Unavailable, "pubsubtest: server closed")
	case err != nil:
		return status.FromContextError(err).Err()
	}
	return nil
}

// FailNext makes the next n calls of method fail with code (and the
// message "pubsubtest: injected fault") before the call does anything.
// method is the short RPC name: "Publish", "Pull", "Acknowledge",
// "ModifyAckDeadline", "StreamingPull" (the stream fails as it opens),
// "CreateSubscription", …. n = 0 cancels.
func (s *Server) FailNext(method string, n int, code codes.Code) {
	s.FailNextWith(method, n, status.New(code, "pubsubtest: injected fault"))
}

// FailNextWith is FailNext with the whole status to fail with, details
// included: an errdetails.ErrorInfo, say, as the service attaches to most
// errors (AIP-193).
func (s *Server) FailNextWith(method string, n int, st *status.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.methodLocked(method)
	m.failN, m.failSt = n, st
}

// SetLatency delays every later call of method by d before it runs (for
// StreamingPull: the opening of each stream); 0 removes the delay. The
// delay ends early when the caller cancels or the server closes.
func (s *Server) SetLatency(method string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methodLocked(method).latency = d
}

// StallEvery holds back the answer of every k-th later call of method (the
// k-th, 2k-th, … from now: a fraction 1/k, deterministically) for d: the
// call runs at once, so its effect (a Publish's messages) is applied, and
// its answer is sent only after d, as a slow service's. A stalled call
// ends early, with the caller's cancellation or UNAVAILABLE when the
// server closes, and its effect stays. MethodStats.Stalled counts the
// calls stalled. k = 0 removes the fault. It is meant for unary methods
// ("Publish", "Acknowledge", …); a stalled StreamingPull only ends late.
func (s *Server) StallEvery(method string, k int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.methodLocked(method)
	m.stallEvery, m.stallSeen, m.stallFor = max(k, 0), 0, d
}

// FailNextAckIDs makes the next n ack ids received on exactly-once
// subscriptions (in Acknowledge, ModifyAckDeadline or stream requests) fail
// with the given per-ack-id reason instead of being applied, as the
// service reports it: "TRANSIENT_FAILURE_UNORDERED_ACK_ID" (a transient
// failure, which Google's clients retry; on a stream the ack id comes back
// as unordered), another "TRANSIENT_FAILURE_…" reason (a temporary
// failure), or "PERMANENT_FAILURE_INVALID_ACK_ID" (final: the ack id is
// taken for expired). n = 0 cancels.
func (s *Server) FailNextAckIDs(n int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ackFaults, s.ackReason = n, reason
}

// ackFaultLocked returns the injected reason for the next ack id of sub, or
// "" when none applies.
func (s *Server) ackFaultLocked(sub *subscription) string {
	if s.ackFaults == 0 || !sub.exactlyOnce() {
		return ""
	}
	s.ackFaults--
	return s.ackReason
}

// KillStreams ends open streams with the given status and returns how many
// it ended: the streams with the given ids (StreamInfo.ID), or every open
// stream when no id is given. The messages out on them stay out until
// their deadlines. A stream whose client stopped reading, so that the
// server is blocked sending to it (HTTP/2 flow control), ends once that
// send completes or the client goes away: gRPC offers a handler no way to
// abandon a blocked send.
func (s *Server) KillStreams(code codes.Code, msg string, ids ...int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.streamsLocked(ids) {
		if !st.finished {
			s.finishLocked(st, status.Error(code, msg))
			n++
		}
	}
	return n
}

// streamsLocked returns the streams with the given ids that exist, or every
// stream when ids is empty.
func (s *Server) streamsLocked(ids []int64) []*stream {
	if len(ids) == 0 {
		return s.streams
	}
	var out []*stream
	for _, id := range ids {
		if st := s.streamLocked(id); st != nil {
			out = append(out, st)
		}
	}
	return out
}

func (s *Server) streamLocked(id int64) *stream {
	if id < 1 || id > int64(len(s.streams)) {
		return nil
	}
	return s.streams[id-1] // ids are 1, 2, … in order of opening
}

// StallStreams stops (true) or resumes (false) sending on streams: no
// message and no heartbeat answer goes out while a stream is stalled, but
// its requests are still read and applied. With ids (StreamInfo.ID) it
// stalls or resumes those streams and returns how many of them exist;
// without, every stream, present and future, and it returns how many
// exist now. A stream is stalled while either the call without ids or one
// naming it says so.
func (s *Server) StallStreams(stalled bool, ids ...int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ids) == 0 {
		s.stallAll = stalled
	}
	sts := s.streamsLocked(ids)
	for _, st := range sts {
		if len(ids) > 0 {
			st.stalled = stalled
		}
		st.info.Stalled = s.stallAll || st.stalled
		if !st.info.Stalled && !st.finished {
			st.wake()
		}
	}
	return len(sts)
}
