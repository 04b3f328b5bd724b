package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/connect"
)

// defaultCheckTimeout bounds the reachability check made before a command
// starts its real work.
const defaultCheckTimeout = 10 * time.Second

// endpointFlags are the connection flags of tail, publish and bench.
type endpointFlags struct {
	project  string
	endpoint string
	insecure bool
	check    time.Duration
}

func (e *endpointFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.project, "project", "", "project of short resource names (default $PUBSUB_PROJECT_ID or $GOOGLE_CLOUD_PROJECT)")
	fs.StringVar(&e.endpoint, "endpoint", "", "host:port to connect to (default $PUBSUB_EMULATOR_HOST, else pubsub.googleapis.com:443)")
	fs.BoolVar(&e.insecure, "insecure", false, "plaintext, no credentials, for --endpoint (implied by PUBSUB_EMULATOR_HOST)")
	fs.DurationVar(&e.check, "connect-timeout", defaultCheckTimeout, "how long to wait for the endpoint to answer before giving up")
}

// describe names the endpoint for error messages.
func (e *endpointFlags) describe() string {
	switch {
	case e.endpoint != "":
		return e.endpoint
	case os.Getenv(connect.EmulatorHostEnv) != "":
		return os.Getenv(connect.EmulatorHostEnv) + " ($" + connect.EmulatorHostEnv + ")"
	}
	return connect.DefaultEndpoint
}

func (e *endpointFlags) validate() error {
	if e.insecure && e.endpoint == "" {
		return usagef("--insecure needs --endpoint")
	}
	if e.check <= 0 {
		return usagef("--connect-timeout %v: want > 0", e.check)
	}
	return nil
}

// dial connects as the flags say; the caller closes the connection.
func (e *endpointFlags) dial(ctx context.Context, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	conn, err := connect.Dial(ctx, connect.Options{Endpoint: e.endpoint, Insecure: e.insecure, DialOptions: extra})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w (set %s for an emulator, or run `gcloud auth application-default login`)",
			e.describe(), err, connect.EmulatorHostEnv)
	}
	return conn, nil
}

// checkResource makes one cheap call (GetTopic, GetSubscription) so that an
// unreachable endpoint or a missing resource is reported at once, clearly,
// instead of being retried in the background. A permission error passes:
// a caller allowed to publish or consume need not be allowed to get.
func (e *endpointFlags) checkResource(ctx context.Context, what string, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, e.check)
	defer cancel()
	err := call(ctx)
	switch status.Code(err) {
	case codes.OK, codes.PermissionDenied:
		return nil
	case codes.NotFound:
		return fmt.Errorf("%s not found at %s: %w", what, e.describe(), err)
	case codes.Unavailable, codes.DeadlineExceeded:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || status.Code(err) == codes.Unavailable {
			return fmt.Errorf("cannot reach %s within %v: %w", e.describe(), e.check, err)
		}
	case codes.Canceled:
		return err
	}
	return fmt.Errorf("checking %s at %s: %w", what, e.describe(), err)
}
