// Package connect dials Pub/Sub for the Subscriber (pubsubflow.Dial) and
// the Publisher (publisher.Dial) with the same conventions: the emulator
// named by PUBSUB_EMULATOR_HOST in plaintext, otherwise TLS with
// Application Default Credentials, and the caller's Options on top.
package connect

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// DefaultEndpoint is the production Pub/Sub endpoint.
const DefaultEndpoint = "pubsub.googleapis.com:443"

// scope is the OAuth2 scope requested for Application Default Credentials.
const scope = "https://www.googleapis.com/auth/pubsub"

// EmulatorHostEnv names the environment variable that points clients at a
// Pub/Sub emulator ("host:port").
const EmulatorHostEnv = "PUBSUB_EMULATOR_HOST"

// maxReceiveMessageSize is the largest gRPC message a connection made by
// Dial accepts (20 MiB, as Google's Go client dials): the
// service delivers messages of up to 10 MB, and gRPC's own default of 4 MiB
// would make every larger one fail its stream. A connection of your own
// needs grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(...)) for the
// same.
const maxReceiveMessageSize = limits.MaxReceiveMessageBytes

// defaultUserAgent is sent as the gRPC user agent unless Options.UserAgent
// overrides it.
const defaultUserAgent = "pubsubflow"

// Options configures Dial. The zero value means: the emulator named by
// PUBSUB_EMULATOR_HOST in plaintext without credentials when it is set,
// otherwise TLS to DefaultEndpoint with Application Default Credentials.
type Options struct {
	// Endpoint is the "host:port" (or any gRPC target) to connect to. Empty
	// means PUBSUB_EMULATOR_HOST when set (which also implies Insecure),
	// otherwise DefaultEndpoint.
	Endpoint string

	// Insecure connects in plaintext and sends no credentials (for an
	// emulator or a test server). It cannot be combined with TokenSource,
	// since per-RPC credentials must never travel unencrypted.
	Insecure bool

	// TokenSource supplies OAuth2 tokens sent as per-RPC credentials. Nil
	// means Application Default Credentials with scope (unless Insecure).
	TokenSource oauth2.TokenSource

	// UserAgent is the gRPC user agent; empty means "pubsubflow".
	UserAgent string

	// UnaryInterceptors and StreamInterceptors are chained, in order, on
	// every call made through the connection.
	UnaryInterceptors  []grpc.UnaryClientInterceptor
	StreamInterceptors []grpc.StreamClientInterceptor

	// DialOptions are applied after the ones Dial builds, so they can
	// override them (for example grpc.WithTransportCredentials with a
	// private root CA).
	DialOptions []grpc.DialOption
}

// Validate reports options that cannot work together.
func (o Options) Validate() error {
	if o.Insecure && o.TokenSource != nil {
		return errors.New("pubsubflow/connect: a TokenSource needs TLS; it cannot be combined with Insecure")
	}
	for i, u := range o.UnaryInterceptors {
		if u == nil {
			return fmt.Errorf("pubsubflow/connect: UnaryInterceptors[%d] is nil", i)
		}
	}
	for i, s := range o.StreamInterceptors {
		if s == nil {
			return fmt.Errorf("pubsubflow/connect: StreamInterceptors[%d] is nil", i)
		}
	}
	return nil
}

// resolved is what Dial will do once defaults and the environment are
// applied.
type resolved struct {
	target   string
	insecure bool
}

// resolve applies the endpoint rules: an explicit Endpoint wins; then the
// emulator variable (plaintext); then the production endpoint.
func (o Options) resolve() resolved {
	if o.Endpoint != "" {
		return resolved{target: o.Endpoint, insecure: o.Insecure}
	}
	if host := os.Getenv(EmulatorHostEnv); host != "" {
		return resolved{target: host, insecure: true}
	}
	return resolved{target: DefaultEndpoint, insecure: o.Insecure}
}
