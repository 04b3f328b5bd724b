package gcemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStartServesPubSub checks that Start returns the address of a running
// emulator that answers the Pub/Sub API, and that its cleanup really kills
// the Java server (the port stops accepting connections).
func TestStartServesPubSub(t *testing.T) {
	var addr string
	t.Run("run", func(t *testing.T) {
		addr = Start(t)
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		name := "projects/gcemu-test/topics/gcemu-topic"
		got, err := pubsubpb.NewPublisherClient(conn).CreateTopic(ctx, &pubsubpb.Topic{Name: name})
		if err != nil {
			t.Fatalf("CreateTopic on the emulator: %v", err)
		}
		if got.GetName() != name {
			t.Fatalf("CreateTopic returned %q, want %q", got.GetName(), name)
		}
	})
	if addr == "" {
		return // skipped: the emulator is absent
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return // nothing listens any more
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections 10 s after the test's cleanup stopped the emulator", addr)
		}
		time.Sleep(50 * time.Millisecond) // polling the port, not asserting with time
	}
}

func TestFindHonoursEnv(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-emulator")
	t.Setenv(EnvBinary, missing)
	_, err := Find()
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Find with $%s=%s: %v; want ErrNotInstalled naming the path", EnvBinary, missing, err)
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of ending the
// real test, to check how Absent treats CI.
type recorder struct {
	testing.TB
	skipped, fatal string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func absentUnder(t *testing.T, ci string) *recorder {
	t.Setenv("CI", ci)
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Absent(r, ErrNotInstalled)
	}()
	<-done
	return r
}

func TestAbsentSkipsOutsideCI(t *testing.T) {
	r := absentUnder(t, "")
	if r.skipped == "" || r.fatal != "" || strings.Contains(r.skipped, "\n") {
		t.Fatalf("outside CI: skipped=%q fatal=%q; want one skip line", r.skipped, r.fatal)
	}
}

func TestAbsentFailsUnderCI(t *testing.T) {
	r := absentUnder(t, "true")
	if r.fatal == "" || r.skipped != "" {
		t.Fatalf("CI=true: skipped=%q fatal=%q; want a failure", r.skipped, r.fatal)
	}
}
