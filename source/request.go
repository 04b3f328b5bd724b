package source

import (
	"context"
	"net/url"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/metadata"
)

// protocolVersion 1 makes the server answer heartbeats, which is what lets
// the watchdog tell a live idle stream from a dead one.
const protocolVersion = 1

// requestParamsKey is the metadata key Google's front ends route by.
const requestParamsKey = "x-goog-request-params"

// withRouting adds x-goog-request-params "param=value" (query-escaped, as
// Google's clients send it), which routes a call to the resource's region.
func withRouting(ctx context.Context, param, value string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, requestParamsKey, param+"="+url.QueryEscape(value))
}

// share returns stream i's part of a flow-control limit divided among n
// streams: the parts add up to the limit, and none is below 1 (0 on the
// wire would mean unlimited). Unlimited is 0.
func share(limit int64, i, n int) int64 {
	if limit == Unlimited {
		return 0
	}
	part := limit / int64(n)
	if int64(i) < limit%int64(n) {
		part++
	}
	return max(part, 1)
}

// seconds rounds d up to whole seconds, as the API counts them.
func seconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

// initialRequest is the first request of a stream: the only one that
// carries the stream's settings.
func (s *Source) initialRequest(maxMsgs, maxBytes int64) *pubsubpb.StreamingPullRequest {
	return &pubsubpb.StreamingPullRequest{
		Subscription:             s.cfg.Subscription,
		StreamAckDeadlineSeconds: s.deadline.Load(),
		ClientId:                 s.clientID,
		MaxOutstandingMessages:   maxMsgs,
		MaxOutstandingBytes:      maxBytes,
		ProtocolVersion:          protocolVersion,
	}
}

// heartbeatRequest is every later request: built from the zero value, so no
// initial-only field can leak into it, carrying at most a changed stream
// ack deadline (which the API allows on any request).
func heartbeatRequest(current, sent int32) *pubsubpb.StreamingPullRequest {
	req := &pubsubpb.StreamingPullRequest{}
	if current != sent {
		req.StreamAckDeadlineSeconds = current
	}
	return req
}
