package pubsubflow

import (
	"context"

	"google.golang.org/grpc"

	"github.com/pubsubflow/pubsubflow/internal/connect"
)

// DefaultEndpoint is the production Pub/Sub endpoint.
const DefaultEndpoint = connect.DefaultEndpoint

// EmulatorHostEnv names the environment variable that points clients at a
// Pub/Sub emulator ("host:port").
const EmulatorHostEnv = connect.EmulatorHostEnv

// ConnectOptions configures Dial: Endpoint, Insecure, TokenSource,
// UserAgent, UnaryInterceptors, StreamInterceptors and DialOptions. The
// zero value means: the emulator named by PUBSUB_EMULATOR_HOST in
// plaintext without credentials when it is set, otherwise TLS to
// DefaultEndpoint with Application Default Credentials. An explicit
// Endpoint wins over the variable; Insecure cannot be combined with a
// TokenSource. It is the same type as publisher.ConnectOptions, so one
// value configures both sides.
type ConnectOptions = connect.Options

// Dial returns a client connection for Pub/Sub, owned by the caller (Close
// it). It uses grpc.NewClient, so it does not wait for the connection; ctx
// bounds only the lookup of Application Default Credentials. Wrap the
// connection with pubsubpb.NewSubscriberClient or NewPublisherClient.
// It raises gRPC's receive limit to 20 MiB per message (gRPC's default,
// 4 MiB, is below the 10 MB messages the service delivers);
// ConnectOptions.DialOptions, applied last, may change that.
func Dial(ctx context.Context, o ConnectOptions) (*grpc.ClientConn, error) {
	return connect.Dial(ctx, o)
}
