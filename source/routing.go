package source

import (
	"context"
	"net/url"

	"google.golang.org/grpc/metadata"
)

// requestParamsKey is the metadata key Google's front ends route by.
const requestParamsKey = "x-goog-request-params"

// withRouting returns a context whose outgoing gRPC metadata carries
// x-goog-request-params "param=value" (value query-escaped, as Google's
// clients send it), which Google's front ends use to route a call to the
// resource's region.
func withRouting(ctx context.Context, param, value string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, requestParamsKey, param+"="+url.QueryEscape(value))
}
