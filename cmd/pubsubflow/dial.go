package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// defaultCheckTimeout bounds the reachability check made before a command
// starts its real work.
const defaultCheckTimeout = 10 * time.Second

// endpointFlags are the connection flags: every resource command's (the
// groups declare them once for their verbs), tail's, publish's and
// bench's.
type endpointFlags struct {
	project  string
	endpoint string
	insecure bool
	check    time.Duration
}

func (e *endpointFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&e.project, "project", "", "project of short resource names (default $PUBSUB_PROJECT_ID, else $GOOGLE_CLOUD_PROJECT, else $CLOUDSDK_CORE_PROJECT)")
	fs.StringVar(&e.endpoint, "endpoint", "", "host:port to connect to (default $PUBSUB_EMULATOR_HOST, else pubsub.googleapis.com:443)")
	fs.BoolVar(&e.insecure, "insecure", false, "plaintext, no credentials, for --endpoint (implied by PUBSUB_EMULATOR_HOST)")
	fs.DurationVar(&e.check, "connect-timeout", defaultCheckTimeout, "how long to wait for the endpoint to answer before giving up")
}

// projectEnv are the variables consulted, in order, for the project of a
// short resource name when --project is not given.
var projectEnv = []string{"PUBSUB_PROJECT_ID", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"}

// projectID is --project, else the first of projectEnv set, else "".
func (e *endpointFlags) projectID() string {
	p := e.project
	for _, v := range projectEnv {
		p = cmp.Or(p, os.Getenv(v))
	}
	return p
}

// resolve returns the full name of a resource of kind ("topics",
// "subscriptions", "snapshots") given as "projects/P/KIND/ID", or as "ID"
// with the project from --project or the environment. A bad name is a
// usage error.
func (e *endpointFlags) resolve(kind, name string) (string, error) {
	singular := strings.TrimSuffix(kind, "s")
	project, id := e.projectID(), name
	if strings.HasPrefix(name, "projects/") {
		parts := strings.Split(name, "/")
		if len(parts) != 4 || parts[2] != kind {
			return "", usagef("%s %q: want projects/PROJECT/%s/ID", singular, name, kind)
		}
		project, id = parts[1], parts[3]
	} else if strings.Contains(name, "/") {
		return "", usagef("%s %q: want projects/PROJECT/%s/ID or a bare ID", singular, name, kind)
	} else if project == "" {
		return "", usagef("%s %q is not a full name and no project is set: give projects/PROJECT/%s/%s, --project, or $%s",
			singular, name, kind, name, projectEnv[0])
	}
	// The service's name rules (internal/limits, the one validator the
	// library uses too).
	if limits.CheckProjectID(project) != nil {
		return "", usagef("%s %q: bad project id %q (%s)", singular, name, project, limits.ProjectIDRule)
	}
	if limits.CheckResourceID(kind, id) != nil {
		return "", usagef("%s %q: bad id %q (%s)", singular, name, id, limits.ResourceIDRule)
	}
	return "projects/" + project + "/" + kind + "/" + id, nil
}

// describe names the endpoint for error messages.
func (e *endpointFlags) describe() string {
	switch {
	case e.endpoint != "":
		return e.endpoint
	case os.Getenv(pubsubflow.EmulatorHostEnv) != "":
		return os.Getenv(pubsubflow.EmulatorHostEnv) + " ($" + pubsubflow.EmulatorHostEnv + ")"
	}
	return pubsubflow.DefaultEndpoint
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
	conn, err := pubsubflow.Dial(ctx, pubsubflow.ConnectOptions{Endpoint: e.endpoint, Insecure: e.insecure, DialOptions: extra})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w (set %s for an emulator, or run `gcloud auth application-default login`)",
			e.describe(), err, pubsubflow.EmulatorHostEnv)
	}
	return conn, nil
}

// open checks the flags, resolves name (of kind "topics" or
// "subscriptions"), dials, and makes one cheap call (GetTopic,
// GetSubscription) so that an unreachable endpoint or a missing resource
// is reported at once, clearly, instead of being retried in the
// background. A permission error passes: a caller allowed to publish or
// consume need not be allowed to get. It returns the connection, which
// the caller closes, and the full name.
func (e *endpointFlags) open(ctx context.Context, kind, name string, extra ...grpc.DialOption) (*grpc.ClientConn, string, error) {
	if err := e.validate(); err != nil {
		return nil, "", err
	}
	name, err := e.resolve(kind, name)
	if err != nil {
		return nil, "", err
	}
	conn, err := e.dial(ctx, extra...)
	if err != nil {
		return nil, "", err
	}
	if err := e.checkResource(ctx, conn, kind, name); err != nil {
		_ = conn.Close()
		return nil, "", err
	}
	return conn, name, nil
}

func (e *endpointFlags) checkResource(ctx context.Context, conn *grpc.ClientConn, kind, name string) error {
	ctx, cancel := context.WithTimeout(ctx, e.check)
	defer cancel()
	var err error
	if kind == "topics" {
		_, err = pubsubpb.NewPublisherClient(conn).GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name})
	} else {
		_, err = pubsubpb.NewSubscriberClient(conn).GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: name})
	}
	what := strings.TrimSuffix(kind, "s") + " " + name
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
