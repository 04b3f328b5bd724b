package pubsubtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// Server is an in-process Pub/Sub service speaking real gRPC. Make it with
// NewServer and stop it with Close. All its methods are safe for concurrent
// use.
type Server struct {
	cfg config

	// mu guards all the state below. It is never held across a network
	// send, a channel wait or a timer.
	mu         sync.Mutex
	topics     map[string]*topic
	subs       map[string]*subscription
	msgStats   []msgCounters // by message seq-1-msgBase (see countersLocked)
	msgBase    uint64        // counters of the messages up to this seq are forgotten
	nextAck    uint64
	ackBuf     []byte
	nextStream int64
	streams    []*stream
	leases     leaseHeap
	methods    map[string]*methodState
	stallAll   bool
	ackFaults  int
	ackReason  string
	closed     bool
	bufLis     *bufconn.Listener // current in-memory listener
	cc         *grpc.ClientConn  // made by ClientConn, closed by Close
	addr       string
	feat       serverFeatures // retry backoffs, snapshots, held bytes

	expiryWake chan struct{} // a lease heap top moved earlier
	done       chan struct{} // closed by Close
	wg         sync.WaitGroup

	// lifeMu serialises Restart and Close.
	lifeMu    sync.Mutex
	gsrv      *grpc.Server
	serveDone chan struct{}
}

// rpcServer carries the gRPC methods, which would otherwise clash with the
// Server's direct helpers of the same names (CreateTopic, Publish, …).
type rpcServer struct {
	pubsubpb.UnimplementedPublisherServer
	pubsubpb.UnimplementedSubscriberServer
	*Server
}

type msgCounters struct {
	deliveries uint32
	acks       uint32
}

// NewServer starts a server listening on loopback TCP (or in memory with
// WithBufconn). It starts no package-level goroutine and shares no state
// with other servers, so it may be created inside a testing/synctest bubble
// (with WithBufconn). Close stops every goroutine it started.
func NewServer(opts ...Option) (*Server, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		topics:     make(map[string]*topic),
		subs:       make(map[string]*subscription),
		methods:    make(map[string]*methodState),
		expiryWake: make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	lis, err := s.listen(cfg.addr)
	if err != nil {
		return nil, err
	}
	s.serve(lis)
	s.wg.Add(1)
	go s.expiryLoop()
	return s, nil
}

func (s *Server) listen(addr string) (net.Listener, error) {
	if s.cfg.bufconn {
		l := bufconn.Listen(bufconnSize)
		s.mu.Lock()
		s.bufLis = l
		s.addr = "bufconn"
		s.mu.Unlock()
		return l, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pubsubtest: listen on %s: %w", addr, err)
	}
	s.mu.Lock()
	s.addr = l.Addr().String()
	s.mu.Unlock()
	return l, nil
}

func (s *Server) serve(lis net.Listener) {
	g := grpc.NewServer(
		grpc.UnaryInterceptor(s.unaryInterceptor),
		grpc.StreamInterceptor(s.streamInterceptor),
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.WaitForHandlers(true),
	)
	r := &rpcServer{Server: s}
	pubsubpb.RegisterPublisherServer(g, r)
	pubsubpb.RegisterSubscriberServer(g, r)
	done := make(chan struct{})
	s.gsrv, s.serveDone = g, done
	go func() {
		defer close(done)
		_ = g.Serve(lis) // returns when Stop closes the listener
	}()
}

// Addr is the address the server listens on: "host:port" for TCP (for a
// client that dials by address, such as one given PUBSUB_EMULATOR_HOST), or
// "bufconn" with WithBufconn, which only Dial and ClientConn reach.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// target is the gRPC target to pass to grpc.NewClient together with
// dialOptions.
func (s *Server) target() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targetLocked()
}

func (s *Server) targetLocked() string {
	if s.cfg.bufconn {
		return "passthrough:///bufconn"
	}
	return s.addr
}

// dialOptions are the options a client needs to reach the server:
// plaintext, and with WithBufconn a dialer to the in-memory listener (which
// follows the server across Restart), and the receive limit pubsubflow.Dial
// sets (20 MiB), so tests see what users see.
func (s *Server) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The receive limit of pubsubflow.Dial (a user's dial), not more, so a
		// test sees what a user would.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.MaxReceiveMessageBytes)),
	}
	if s.cfg.bufconn {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			s.mu.Lock()
			l := s.bufLis
			s.mu.Unlock()
			return l.DialContext(ctx)
		}))
	}
	return opts
}

// Dial returns a new client connection to the server, owned by the caller:
// plaintext, with the 20 MiB receive limit pubsubflow.Dial sets (so a test
// sees what a user's connection sees), and with WithBufconn a dialer to the
// in-memory listener that follows the server across Restart. extra options
// come after those. The context is unused (grpc.NewClient connects lazily)
// and kept for symmetry with other dialers.
func (s *Server) Dial(_ context.Context, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient(s.target(), append(s.dialOptions(), extra...)...)
}

// ClientConn returns a client connection to the server that the server owns
// and closes in Close; it is made on first use. Do not hand it to a client
// that closes its connection (Google's pubsub.Client does): use Dial there.
func (s *Server) ClientConn() *grpc.ClientConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cc == nil {
		// grpc.NewClient connects lazily, so this neither blocks nor calls
		// the dialer (which takes s.mu); it only fails on bad options,
		// which ours are not.
		cc, err := grpc.NewClient(s.targetLocked(), s.dialOptions()...)
		if err != nil {
			panic(fmt.Sprintf("pubsubtest: dial: %v", err))
		}
		s.cc = cc
	}
	return s.cc
}

// errClosed is returned by Restart after Close.
var errClosed = errors.New("pubsubtest: server closed")

// Restart stops serving, which ends every open stream and connection (clients
// see UNAVAILABLE), and serves again on the same address. It fails after
// Close. Topics,
// subscriptions, messages, leases and counters are kept: messages
// outstanding on the old streams expire and are redelivered as usual.
func (s *Server) Restart() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errClosed
	}
	s.gsrv.Stop()
	<-s.serveDone
	lis, err := s.listen(s.Addr())
	if err != nil {
		return err
	}
	s.serve(lis)
	return nil
}

// Close stops the server: it closes its own ClientConn, ends every stream and
// call, and waits for every goroutine it started.
func (s *Server) Close() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	cc := s.cc
	s.mu.Unlock()
	if cc != nil {
		_ = cc.Close() // may already be closed by a client that took it
	}
	s.gsrv.Stop()
	<-s.serveDone
	s.wg.Wait()
	return nil
}

// waitDone waits for d, or until ctx is done or the server closes.
func (s *Server) waitDone(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errClosed
	}
}
