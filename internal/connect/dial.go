package connect

import (
	"context"
	"fmt"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/oauth"
)

// Dial returns a client connection for Pub/Sub, owned by the caller (Close
// it). It uses grpc.NewClient, so it does not wait for the connection; ctx
// bounds only the lookup of Application Default Credentials. Wrap the
// connection with pubsubpb.NewSubscriberClient or NewPublisherClient.
// It raises gRPC's receive limit to 20 MiB per message (gRPC's default,
// 4 MiB, is below the 10 MB messages the service delivers);
// Options.DialOptions, applied last, may change that.
func Dial(ctx context.Context, o Options) (*grpc.ClientConn, error) {
	opts, target, err := dialOptions(ctx, o)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("pubsubflow/connect: new client for %s: %w", target, err)
	}
	return cc, nil
}

// dialOptions returns the target and the gRPC dial options Dial would use,
// for callers that build their connection themselves. They accept received
// messages up to maxReceiveMessageSize; Options.DialOptions come last and
// may change that.
func dialOptions(ctx context.Context, o Options) ([]grpc.DialOption, string, error) {
	if err := o.Validate(); err != nil {
		return nil, "", err
	}
	r := o.resolve()
	ua := o.UserAgent
	if ua == "" {
		ua = defaultUserAgent
	}
	opts := []grpc.DialOption{
		grpc.WithUserAgent(ua),
		// gRPC's 4 MiB default is below what the service sends (a 10 MB
		// message in a StreamingPull response); with it, such a message
		// could never be received.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxReceiveMessageSize)),
	}
	if r.insecure {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		ts, err := tokenSource(ctx, o.TokenSource)
		if err != nil {
			return nil, "", err
		}
		opts = append(opts,
			grpc.WithTransportCredentials(credentials.NewTLS(nil)), // system roots
			grpc.WithPerRPCCredentials(oauth.TokenSource{TokenSource: ts}),
			// Outermost, so it sees the final status of every call.
			grpc.WithChainUnaryInterceptor(ts.unaryInvalidator),
			grpc.WithChainStreamInterceptor(ts.streamInvalidator),
		)
	}
	if len(o.UnaryInterceptors) > 0 {
		opts = append(opts, grpc.WithChainUnaryInterceptor(o.UnaryInterceptors...))
	}
	if len(o.StreamInterceptors) > 0 {
		opts = append(opts, grpc.WithChainStreamInterceptor(o.StreamInterceptors...))
	}
	opts = append(opts, o.DialOptions...)
	return opts, r.target, nil
}

// tokenSource returns ts, or Application Default Credentials for scope,
// wrapped so that an UNAUTHENTICATED answer makes the next call fetch a
// fresh token (for ADC; a caller's source decides its own caching).
// oauth2's sources cache a token until shortly before it expires.
func tokenSource(ctx context.Context, ts oauth2.TokenSource) (*refreshingSource, error) {
	if ts != nil {
		return &refreshingSource{ts: ts}, nil
	}
	r, err := adcSource(ctx)
	if err != nil {
		return nil, fmt.Errorf("pubsubflow/connect: application default credentials: %w", err)
	}
	return r, nil
}
