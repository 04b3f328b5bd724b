package ackids

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// TransientPrefix starts every per-ack-id failure reason that is worth
// retrying (TRANSIENT_FAILURE_*); others (PERMANENT_FAILURE_*) are final.
const TransientPrefix = "TRANSIENT_"

// FailureReasons returns the per-ack-id reasons of an exactly-once
// Acknowledge / ModifyAckDeadline failure, carried as an
// errdetails.ErrorInfo's metadata (ack id → reason), or nil when err
// carries none (the failure is the whole RPC's).
func FailureReasons(err error) map[string]string {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && len(info.GetMetadata()) > 0 {
			return info.GetMetadata()
		}
	}
	return nil
}

// Transient reports whether a per-ack-id failure reason is retried.
func Transient(reason string) bool { return strings.HasPrefix(reason, TransientPrefix) }
