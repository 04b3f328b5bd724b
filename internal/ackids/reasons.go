package ackids

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// TransientPrefix starts every per-ack-id failure reason that is worth
// retrying (TRANSIENT_FAILURE_*); PermanentPrefix those that are final
// (PERMANENT_FAILURE_*).
const (
	TransientPrefix = "TRANSIENT_FAILURE_"
	PermanentPrefix = "PERMANENT_FAILURE_"
)

// FailureReasons returns the per-ack-id reasons of an exactly-once
// Acknowledge / ModifyAckDeadline failure: the entries of an
// errdetails.ErrorInfo's metadata that map an ack id to a
// TRANSIENT_FAILURE_* or PERMANENT_FAILURE_* reason. It returns nil when
// err carries none: then the failure is the whole RPC's, whatever other
// ErrorInfo it carries (AIP-193 attaches one, with a reason such as
// RATE_LIMIT_EXCEEDED, to most errors).
func FailureReasons(err error) map[string]string {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var reasons map[string]string
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok {
			continue
		}
		for id, reason := range info.GetMetadata() {
			if strings.HasPrefix(reason, TransientPrefix) || strings.HasPrefix(reason, PermanentPrefix) {
				if reasons == nil {
					reasons = map[string]string{}
				}
				reasons[id] = reason
			}
		}
	}
	return reasons
}

// Transient reports whether a per-ack-id failure reason is retried.
func Transient(reason string) bool { return strings.HasPrefix(reason, TransientPrefix) }
