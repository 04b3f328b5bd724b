package source

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestReceiveTooLargeIsTerminal: a message over the client's own receive
// limit fails every retry the same way, so the default policy ends the
// source, and the error names the option to raise while keeping its code;
// the service's own RESOURCE_EXHAUSTED (a quota) is still retried.
func TestReceiveTooLargeIsTerminal(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9437300 vs. 4194304)"), false},
		{status.Error(codes.ResourceExhausted, "grpc: received message after decompression larger than max 4194304"), false},
		{status.Error(codes.ResourceExhausted, "grpc: message after decompression larger than max (5 vs. 4)"), false},
		{status.Error(codes.ResourceExhausted, "Quota exceeded for quota metric 'Subscriber throughput'"), true},
		{status.Error(codes.Internal, "grpc: received message larger than max (1 vs. 0)"), true},
	} {
		if got := DefaultClassifier(failure(c.err, 1, nil)); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
	raw := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9437300 vs. 4194304)")
	err := explain(raw)
	var tl *ReceiveTooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("explain: %T, want *ReceiveTooLargeError", err)
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("code %v, want ResourceExhausted", status.Code(err))
	}
	if !strings.Contains(err.Error(), "grpc.MaxCallRecvMsgSize") || !strings.Contains(err.Error(), "9437300") {
		t.Errorf("error %q must name grpc.MaxCallRecvMsgSize and keep the sizes", err)
	}
	if explain(err) != err {
		t.Error("explain wrapped twice")
	}
	other := status.Error(codes.Unavailable, "x")
	if explain(other) != other {
		t.Error("explain changed an unrelated error")
	}
}
