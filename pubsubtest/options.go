package pubsubtest

import (
	"fmt"
	"time"
)

// Option configures a Server made by NewServer.
type Option func(*config)

// Sizes the server uses, fixed since a test has no reason to change them.
const (
	// bufconnSize is the buffer of the in-memory listener.
	bufconnSize = 1 << 20
	// maxResponseBytes is the approximate encoded size above which a
	// StreamingPull response takes no further message: just under 4 MiB,
	// gRPC's default receive limit (a larger single message is still sent
	// alone).
	maxResponseBytes = 4<<20 - 64<<10
	// maxRecvMsgSize is what the server receives in one gRPC message, more
	// than any request the service accepts, so that the service's own
	// limits, not gRPC's, refuse an oversized request.
	maxRecvMsgSize = 32 << 20
)

type config struct {
	addr             string
	bufconn          bool
	minAckDeadline   time.Duration
	maxPerResponse   int
	project          string
	recordRequests   bool
	pullWait         time.Duration
	heartbeatDelay   time.Duration
	maxBacklogBytes  int64 // ≤ 0: no bound (see WithMaxBacklogBytes)
	alwaysAttempts   bool  // see WithDeliveryAttemptAlways
	silentHeartbeats bool
	msgStatsLimit    int // ≤ 0: no limit (see WithMessageStatsLimit)
}

func defaultConfig() config {
	return config{
		addr:           "127.0.0.1:0",
		minAckDeadline: 10 * time.Second,
		maxPerResponse: 100,
		project:        "test-project",
		pullWait:       10 * time.Second,
	}
}

func (c *config) validate() error {
	switch {
	case c.minAckDeadline < 0 || c.minAckDeadline > 600*time.Second:
		return fmt.Errorf("pubsubtest: min ack deadline %v must be within 0–600s", c.minAckDeadline)
	case c.maxPerResponse <= 0:
		return fmt.Errorf("pubsubtest: max messages per response %d must be positive", c.maxPerResponse)
	case c.project == "":
		return fmt.Errorf("pubsubtest: empty project")
	case c.heartbeatDelay < 0:
		return fmt.Errorf("pubsubtest: heartbeat delay %v is negative", c.heartbeatDelay)
	case c.pullWait <= 0:
		return fmt.Errorf("pubsubtest: pull wait %v must be positive", c.pullWait)
	}
	return nil
}

// minAckSeconds is the smallest ack deadline in whole seconds that the server
// accepts for subscriptions and streams (10 unless WithMinAckDeadline lowered
// it; never below 1, since the API counts whole seconds).
func (c *config) minAckSeconds() int32 {
	s := int32((c.minAckDeadline + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// WithAddr makes the server listen on the given TCP address instead of
// "127.0.0.1:0" (an ephemeral loopback port).
func WithAddr(addr string) Option { return func(c *config) { c.addr = addr } }

// WithBufconn makes the server listen on an in-memory
// google.golang.org/grpc/test/bufconn listener instead of TCP. Connect with
// Server.Dial or Server.ClientConn. Unlike TCP, it works
// inside a testing/synctest bubble when the server and its clients are all
// created inside the bubble.
func WithBufconn() Option { return func(c *config) { c.bufconn = true } }

// WithMinAckDeadline lowers (or raises) the smallest ack deadline accepted on
// CreateSubscription, UpdateSubscription and StreamingPull (the real service:
// 10 s). The API counts whole seconds, so the effective minimum is d rounded
// up to a second, at least 1 s. Modack seconds stay 0–600 as in the API.
func WithMinAckDeadline(d time.Duration) Option { return func(c *config) { c.minAckDeadline = d } }

// WithMaxMessagesPerResponse sets how many messages one StreamingPull response
// carries at most (default 100).
func WithMaxMessagesPerResponse(n int) Option { return func(c *config) { c.maxPerResponse = n } }

// WithProject sets the project used to expand short names given to the
// helper methods (CreateTopic, CreateSubscription, Publish, …); default
// "test-project".
func WithProject(p string) Option { return func(c *config) { c.project = p } }

// WithRecordStreamRequests keeps every StreamingPullRequest received, for
// StreamInfo.RequestLog. Off by default, since it holds every ack id.
func WithRecordStreamRequests() Option { return func(c *config) { c.recordRequests = true } }

// WithPullWait sets how long a unary Pull without return_immediately waits
// for a message before it returns an empty response (default 10 s).
func WithPullWait(d time.Duration) Option { return func(c *config) { c.pullWait = d } }

// WithHeartbeatDelay answers a heartbeat no sooner than d after it arrives
// (default 0: at once), as network latency would. In virtual time an
// immediate answer carries the very timestamp of the ping, which a client
// that wants a response strictly after its ping (Google's Go client does)
// takes for no answer; a delay of a millisecond avoids that.
func WithHeartbeatDelay(d time.Duration) Option { return func(c *config) { c.heartbeatDelay = d } }

// WithoutHeartbeatAnswers makes the server never answer heartbeats, even on
// a stream that asked for answers with protocol_version 1, as Google's
// Pub/Sub emulator does (and as a network device that drops idle traffic
// appears to). Heartbeats are still counted in StreamInfo.Heartbeats.
func WithoutHeartbeatAnswers() Option { return func(c *config) { c.silentHeartbeats = true } }
