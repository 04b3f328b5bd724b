package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// The service's limits on the values the admin commands send, checked
// before any call so that a wrong value is a usage error (exit 2) naming
// its flag. The service checks them again.
const (
	// The service accepts ack deadlines of 10–600 s; pubsubflow emulator
	// --min-ack-deadline can lower its minimum for tests, so the CLI lets
	// the server judge anything from 1 s.
	minAckDeadline = 1 * time.Second
	maxAckDeadline = 600 * time.Second

	minDeliveryAttempts     = 5
	maxDeliveryAttempts     = 100
	defaultDeliveryAttempts = 5 // what the service uses for 0

	maxBackoff = 600 * time.Second // both retry backoffs: 0–600 s

	maxFilterBytes = 256

	minRetention      = 10 * time.Minute
	maxSubRetention   = 7 * 24 * time.Hour  // a subscription's message retention
	maxTopicRetention = 31 * 24 * time.Hour // a topic's message retention

	// maxListPages bounds the pages a list command follows (of up to
	// listPageSize each), so a server that keeps answering with a next
	// page cannot keep a list running for ever.
	maxListPages = 1000
	listPageSize = 1000
)

// adminUsageTail ends every admin command's usage: how it connects and
// what it prints.
const adminUsageTail = `

Names are full (projects/P/topics/T) or bare ids with --project, else the
first set of $PUBSUB_PROJECT_ID, $GOOGLE_CLOUD_PROJECT and
$CLOUDSDK_CORE_PROJECT. It connects to $PUBSUB_EMULATOR_HOST when set
(pubsubflow emulator, Google's emulator), otherwise to Pub/Sub with
Application Default Credentials; each call waits at most --connect-timeout.
It prints a table, or with --json the API's JSON. Durations are written
90s, 1h30m or 7d.
Exit codes: 0 ok, 1 the call failed (not found, already exists, refused by
the service, unreachable), 2 bad usage.`

// adminOptions are the flags of a resource command: its group's
// connection flags and its own --json.
type adminOptions struct {
	ep   endpointFlags
	json bool
}

// project returns the project of a list command: --project, else the
// environment.
func (o *adminOptions) project() (string, error) {
	p := o.ep.projectID()
	if p == "" {
		return "", usagef("no project is set: give --project or $%s", projectEnv[0])
	}
	if limits.CheckProjectID(p) != nil {
		return "", usagef("bad project id %q (%s)", p, limits.ProjectIDRule)
	}
	return "projects/" + p, nil
}

// adminClient is one connection, the API clients over it, and the flags
// of the command that made it.
type adminClient struct {
	*adminOptions
	conn *grpc.ClientConn
	pub  pubsubpb.PublisherClient
	sub  pubsubpb.SubscriberClient
	out  io.Writer
}

// connect checks the endpoint flags and dials; the caller closes a.conn.
// Each call on the connection waits at most --connect-timeout. No retry:
// an admin command is one step a person or a script repeats if it must,
// and a create that timed out may have happened.
func (o *adminOptions) connect(ctx context.Context, out io.Writer) (*adminClient, error) {
	if err := o.ep.validate(); err != nil {
		return nil, err
	}
	conn, err := o.ep.dial(ctx, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(ctx, o.ep.check)
		defer cancel()
		return invoker(ctx, method, req, reply, cc, opts...)
	}))
	if err != nil {
		return nil, err
	}
	return &adminClient{adminOptions: o, conn: conn, out: out,
		pub: pubsubpb.NewPublisherClient(conn), sub: pubsubpb.NewSubscriberClient(conn)}, nil
}

// failed explains a failed call. action says what was tried ("creating
// subscription S"); subject is the resource the call is about, whose
// absence a NOT_FOUND means ("" when it may be another one: the service's
// message names it).
func (a *adminClient) failed(action, subject string, err error) error {
	where := a.ep.describe()
	switch status.Code(err) {
	case codes.NotFound:
		if subject != "" {
			return fmt.Errorf("%s not found at %s: %w", subject, where, err)
		}
	case codes.AlreadyExists:
		if subject != "" {
			return fmt.Errorf("%s already exists at %s: %w", subject, where, err)
		}
	case codes.Unavailable:
		return fmt.Errorf("%s: cannot reach %s: %w", action, where, err)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: no answer from %s within %v (--connect-timeout): %w", action, where, a.ep.check, err)
	case codes.Canceled:
		return fmt.Errorf("%s: %w", action, err)
	}
	return fmt.Errorf("%s at %s: %w", action, where, err)
}

// apiJSON is a resource in the API's JSON (protojson), for printJSON.
type apiJSON struct{ proto.Message }

func (m apiJSON) MarshalJSON() ([]byte, error) { return protojson.Marshal(m.Message) }

// printJSON prints v as indented JSON: an apiJSON, a list of them, or a
// plain value (the answer of delete and seek).
func (a *adminClient) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	_, err = fmt.Fprintf(a.out, "%s\n", b)
	return err
}

// listAll follows the pages of r's list of project (at most
// maxListPages) and returns every item.
func (r resource[M]) listAll(ctx context.Context, a *adminClient, project string) ([]M, error) {
	action := "listing the " + r.kind + " of " + project
	var all []M
	token := ""
	for range maxListPages {
		items, next, err := r.list(ctx, a, project, token)
		if err != nil {
			return nil, a.failed(action, "", err)
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		if next == token {
			return nil, fmt.Errorf("%s at %s: the server answered the same page token %q twice", action, a.ep.describe(), next)
		}
		token = next
	}
	return nil, fmt.Errorf("%s at %s: more than %d pages of %d", action, a.ep.describe(), maxListPages, listPageSize)
}

// durationValue is a flag holding a duration written as Go writes them
// ("90s", "1h30m") or in whole days ("7d"); set reports whether it was
// given.
type durationValue struct {
	d   time.Duration
	set bool
}

func (v *durationValue) String() string {
	if v == nil || !v.set {
		return ""
	}
	return fmtDuration(v.d)
}

func (v *durationValue) Type() string { return "duration" }

func (v *durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	v.d, v.set = d, true
	return nil
}

// parseDuration accepts Go durations and whole days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && !strings.ContainsAny(days, "hmsuµn.") {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days && n >= 0 && n <= 10000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 90s, 10m, 1h30m or 7d")
	}
	return d, nil
}

// fmtDuration writes d briefly: "7d", "1h", "10m", "1h30m", "12.5s".
func fmtDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// checkRange checks a duration flag against [lo, hi].
func checkRange(flagName string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return usagef("--%s %s: want %s–%s", flagName, fmtDuration(d), fmtDuration(lo), fmtDuration(hi))
	}
	return nil
}

// shortName is name without its "projects/P/KIND/" prefix when P is the
// listed project, so that a list's columns stay readable.
func shortName(name, project string) string {
	if rest, ok := strings.CutPrefix(name, project+"/"); ok {
		if _, id, ok := strings.Cut(rest, "/"); ok {
			return id
		}
	}
	return name
}
