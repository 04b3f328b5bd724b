package connect

import (
	"context"
	"sync"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// refreshingSource hands out tokens from a source it can throw away: when
// the server rejects a call with UNAUTHENTICATED (a token revoked or
// expired in flight), the next call gets a freshly fetched token instead of
// oauth2's cached one. Only sources Dial builds itself (Application
// Default Credentials) can be rebuilt; a caller's TokenSource is kept.
type refreshingSource struct {
	build func() (oauth2.TokenSource, error) // nil: never rebuilt

	mu sync.Mutex
	ts oauth2.TokenSource
}

// Token returns a token from the current source, building one first if
// the last was dropped. The fetch itself runs without the lock.
func (r *refreshingSource) Token() (*oauth2.Token, error) {
	r.mu.Lock()
	ts := r.ts
	if ts == nil {
		var err error
		if ts, err = r.build(); err != nil {
			r.mu.Unlock()
			return nil, err
		}
		r.ts = ts
	}
	r.mu.Unlock()
	return ts.Token()
}

// invalidate drops the cached source when it can be rebuilt.
func (r *refreshingSource) invalidate() {
	if r.build == nil {
		return
	}
	r.mu.Lock()
	r.ts = nil
	r.mu.Unlock()
}

// adcSource returns Application Default Credentials for scope as a
// refreshingSource. Token fetches outlive Dial, so they must not inherit
// its cancellation (they keep its values, e.g. oauth2.HTTPClient).
func adcSource(ctx context.Context) (*refreshingSource, error) {
	ctx = context.WithoutCancel(ctx)
	build := func() (oauth2.TokenSource, error) { return google.DefaultTokenSource(ctx, scope) }
	ts, err := build()
	if err != nil {
		return nil, err
	}
	return &refreshingSource{build: build, ts: ts}, nil
}

func isUnauthenticated(err error) bool { return status.Code(err) == codes.Unauthenticated }

// unaryInvalidator drops the cached token when a call is rejected as
// unauthenticated.
func (r *refreshingSource) unaryInvalidator(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if isUnauthenticated(err) {
		r.invalidate()
	}
	return err
}

// streamInvalidator does the same for streams, whose status arrives from
// RecvMsg.
func (r *refreshingSource) streamInvalidator(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		if isUnauthenticated(err) {
			r.invalidate()
		}
		return nil, err
	}
	return &invalidatingStream{ClientStream: cs, r: r}, nil
}

type invalidatingStream struct {
	grpc.ClientStream
	r *refreshingSource
}

func (s *invalidatingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && isUnauthenticated(err) {
		s.r.invalidate()
	}
	return err
}
