package connect

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// echoServer is a Subscriber server that records the metadata of every
// GetSubscription call, to see what a dialed connection sends.
type echoServer struct {
	pubsubpb.UnimplementedSubscriberServer
	mu     sync.Mutex
	md     []metadata.MD
	reject int // fail the next reject GetSubscription calls with UNAUTHENTICATED
}

func (e *echoServer) GetSubscription(ctx context.Context, req *pubsubpb.GetSubscriptionRequest) (*pubsubpb.Subscription, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	e.mu.Lock()
	e.md = append(e.md, md)
	reject := e.reject > 0
	if reject {
		e.reject--
	}
	e.mu.Unlock()
	if reject {
		return nil, status.Error(codes.Unauthenticated, "token rejected")
	}
	return &pubsubpb.Subscription{Name: req.Subscription}, nil
}

// StreamingPull records the metadata and rejects the stream as
// unauthenticated.
func (e *echoServer) StreamingPull(ss pubsubpb.Subscriber_StreamingPullServer) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	e.mu.Lock()
	e.md = append(e.md, md)
	e.mu.Unlock()
	return status.Error(codes.Unauthenticated, "token rejected")
}

// auths returns the authorization header of every call so far.
func (e *echoServer) auths() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, md := range e.md {
		out = append(out, strings.Join(md.Get("authorization"), ","))
	}
	return out
}

func (e *echoServer) last() metadata.MD {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.md) == 0 {
		return nil
	}
	return e.md[len(e.md)-1]
}

// startEcho serves an echoServer on loopback, with TLS when cert is set. It
// returns the address; the server stops in t.Cleanup.
func startEcho(t *testing.T, cert *tls.Certificate) (*echoServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewServerTLSFromCert(cert)))
	}
	srv := grpc.NewServer(opts...)
	e := &echoServer{}
	pubsubpb.RegisterSubscriberServer(srv, e)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return e, lis.Addr().String()
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "pubsubflow test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true,

		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
