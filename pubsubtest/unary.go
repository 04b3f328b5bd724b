package pubsubtest

import (
	"context"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// Reasons carried per ack id in the ErrorInfo metadata of a failed
// Acknowledge or ModifyAckDeadline on an exactly-once subscription.
const (
	// reasonInvalidAckID: the ack id is not live (expired, already
	// settled, superseded by a redelivery, or malformed). Final.
	reasonInvalidAckID = "PERMANENT_FAILURE_INVALID_ACK_ID"
	// reasonTransientUnordered is a transient failure; clients retry it.
	// Injected by FailNextAckIDs.
	reasonTransientUnordered = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
	// errorInfoReason is the ErrorInfo.reason of those errors.
	errorInfoReason = "EXACTLY_ONCE_ACKID_FAILURE"
	// errorInfoDomain is the ErrorInfo.domain of those errors.
	errorInfoDomain = "pubsub.googleapis.com"
)

// msgInitialOnly is the status message of the INVALID_ARGUMENT that ends a
// stream whose later request sets an initial-only field, as the real
// service words it.
const msgInitialOnly = "You must only set max_outstanding_messages and max_outstanding_bytes on the initial request."

// Publish implements pubsubpb.PublisherServer: 1–1000 messages, each with
// data or attributes. Ids are decimal strings, unique per server.
func (s *rpcServer) Publish(_ context.Context, req *pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
	if err := checkName(limits.Topics, req.GetTopic()); err != nil {
		return nil, err
	}
	if n := proto.Size(req); n > limits.MaxRequestBytes {
		return nil, invalidArg("Request payload size exceeds the limit: %d bytes.", limits.MaxRequestBytes)
	}
	if err := checkMessages(req.GetMessages()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := lookup(s.topics, req.GetTopic())
	if err != nil {
		return nil, err
	}
	ids, err := s.publishLocked(t, req.Messages)
	if err != nil {
		return nil, err
	}
	return &pubsubpb.PublishResponse{MessageIds: ids}, nil
}

func checkMessages(msgs []*pubsubpb.PubsubMessage) error {
	if len(msgs) == 0 {
		return invalidArg("The request contains no messages.")
	}
	if len(msgs) > 1000 {
		return invalidArg("The value for message_count is too large. You passed %d in the request, but the maximum value is 1000.", len(msgs))
	}
	for _, m := range msgs {
		if v := limits.CheckMessage(m.GetData(), m.GetAttributes(), m.GetOrderingKey()); v != nil {
			return invalidArg("%s", v.ServiceMessage())
		}
	}
	return nil
}

// checkAckRequest enforces the real service's 512 KiB request limit,
// counting a rejection against the subscription.
func (s *Server) checkAckRequest(req proto.Message, subName string, ids int) error {
	if n := proto.Size(req); n > limits.MaxAckRequestBytes {
		s.rejectRequest(subName)
		return invalidArg("Request payload size exceeds the limit: %d bytes.", limits.MaxAckRequestBytes)
	}
	if subName == "" {
		s.rejectRequest(subName)
		return invalidArg("No subscription given.")
	}
	if err := checkName(limits.Subscriptions, subName); err != nil {
		return err
	}
	if ids == 0 {
		s.rejectRequest(subName)
		return invalidArg("No ack ids given.")
	}
	return nil
}

func (s *Server) rejectRequest(subName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub := s.subs[subName]; sub != nil {
		sub.stats.RejectedRequests++
	}
}

// Acknowledge implements pubsubpb.SubscriberServer. Ack ids that are not
// live are ignored, except on an exactly-once subscription: then the call
// fails with INVALID_ARGUMENT and an ErrorInfo whose metadata maps each
// failed ack id to its reason; the other ack ids in the request are applied.
func (s *rpcServer) Acknowledge(_ context.Context, req *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	if err := s.checkAckRequest(req, req.GetSubscription(), len(req.GetAckIds())); err != nil {
		return nil, err
	}
	return s.settleAckIDs(req.Subscription, req.AckIds, s.ackLocked)
}

// ModifyAckDeadline implements pubsubpb.SubscriberServer: seconds must be
// 0–600; 0 is a nack. Unknown ack ids are handled as in Acknowledge.
func (s *rpcServer) ModifyAckDeadline(_ context.Context, req *pubsubpb.ModifyAckDeadlineRequest) (*emptypb.Empty, error) {
	if err := s.checkAckRequest(req, req.GetSubscription(), len(req.GetAckIds())); err != nil {
		return nil, err
	}
	if d := req.AckDeadlineSeconds; d < 0 || d > 600 {
		s.rejectRequest(req.Subscription)
		return nil, invalidArg("Invalid ack deadline given: %d seconds; it must be between 0 and 600.", d)
	}
	now := time.Now()
	return s.settleAckIDs(req.Subscription, req.AckIds, func(sub *subscription, id string) bool {
		return s.modackLocked(sub, id, req.AckDeadlineSeconds, now)
	})
}

// settleAckIDs is Acknowledge and ModifyAckDeadline once their request is
// checked: apply settles each ack id of the subscription under s.mu (an
// injected ack fault first), reporting whether the ack id was live. Only an
// exactly-once subscription reports the ack ids that failed.
func (s *Server) settleAckIDs(subName string, ids []string, apply func(sub *subscription, id string) bool) (*emptypb.Empty, error) {
	s.mu.Lock()
	sub, err := lookup(s.subs, subName)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	var failed map[string]string
	for _, id := range ids {
		if reason := s.ackFaultLocked(sub); reason != "" {
			failed = addFailure(failed, id, reason)
			continue
		}
		if !apply(sub, id) && sub.exactlyOnce() {
			failed = addFailure(failed, id, reasonInvalidAckID)
		}
	}
	s.mu.Unlock()
	if failed != nil {
		return nil, ackIDError(failed)
	}
	return &emptypb.Empty{}, nil
}

func addFailure(m map[string]string, id, reason string) map[string]string {
	if m == nil {
		m = make(map[string]string)
	}
	m[id] = reason
	return m
}

// ackIDError is the error the real service returns for failed ack ids on
// an exactly-once subscription; Google's clients read the per-ack-id
// reasons from the ErrorInfo metadata.
func ackIDError(failed map[string]string) error {
	st := status.New(codes.InvalidArgument, "Some acknowledgement ids in the request were invalid. This could be because the acknowledgement ids have expired or the acknowledgement ids were malformed.")
	st, err := st.WithDetails(&errdetails.ErrorInfo{Reason: errorInfoReason, Domain: errorInfoDomain, Metadata: failed})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return st.Err()
}

// Pull implements pubsubpb.SubscriberServer: up to max_messages ready
// messages with the subscription's ack deadline. Without
// return_immediately it waits for a message up to the pull wait (see
// WithPullWait) and then returns an empty response.
func (s *rpcServer) Pull(ctx context.Context, req *pubsubpb.PullRequest) (*pubsubpb.PullResponse, error) {
	if err := checkName(limits.Subscriptions, req.GetSubscription()); err != nil {
		return nil, err
	}
	if req.GetMaxMessages() <= 0 {
		return nil, invalidArg("max_messages must be positive.")
	}
	// return_immediately is deprecated, but clients still send it and the
	// service still honours it, so pubsubtest does too.
	//lint:ignore SA1019 pubsubtest serves the field as the service does, for the clients that send it
	returnNow := req.GetReturnImmediately()
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		sub, err := lookup(s.subs, req.GetSubscription())
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if sub.ready.Len() > 0 || returnNow {
			resp := &pubsubpb.PullResponse{}
			now := time.Now()
			d := time.Duration(sub.pb.AckDeadlineSeconds) * time.Second
			stale := retentionCutoff(sub, now)
			for sub.ready.Len() > 0 && len(resp.ReceivedMessages) < int(req.MaxMessages) {
				if e := sub.ready.Pop(); !s.dropStaleLocked(e, stale) {
					resp.ReceivedMessages = append(resp.ReceivedMessages, s.deliverLocked(e, nil, d, now))
				}
			}
			s.mu.Unlock()
			return resp, nil
		}
		if sub.pullWait == nil {
			sub.pullWait = make(chan struct{})
		}
		wait := sub.pullWait
		s.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(s.cfg.pullWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wait:
		case <-timeout:
			returnNow = true // go round once more to return what is there, or nothing
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-s.done:
			return nil, status.Error(codes.Unavailable, "server closed")
		}
	}
}
