package connect

import (
	"context"
	"net/url"

	"google.golang.org/grpc/metadata"
)

// RequestParamsKey is the metadata key Google's front ends route by.
const RequestParamsKey = "x-goog-request-params"

// WithRouting returns a context whose outgoing gRPC metadata carries
// x-goog-request-params "param=value" (value query-escaped, as Google's
// clients send it), e.g. WithRouting(ctx, "subscription", sub) for
// StreamingPull, Acknowledge and ModifyAckDeadline, or
// WithRouting(ctx, "topic", topic) for Publish.
func WithRouting(ctx context.Context, param, value string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, RequestParamsKey, param+"="+url.QueryEscape(value))
}
