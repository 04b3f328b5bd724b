package source_test

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pubsubflow/pubsubflow/internal/source"
)

// An endpoint that never answers ends the Source after ReconnectTimeout
// (default 2 min; RetryForever never gives up) with an UnreachableError
// that keeps the last attempt's status.
func ExampleUnreachableError() {
	var err error = &source.UnreachableError{
		After:    2 * time.Minute,
		Attempts: 9,
		Last:     status.Error(codes.Unavailable, "connection refused"),
	}
	var ue *source.UnreachableError
	fmt.Println(errors.As(err, &ue), status.Code(err))
	fmt.Println(source.Config{ReconnectTimeout: -2 * time.Second, Subscription: "projects/p/subscriptions/orders"}.Validate())
	// Output:
	// true Unavailable
	// pubsubflow/source: ReconnectTimeout -2s must be ≥ 0 (0 means 2m0s) or RetryForever
}

// A message over the receive limit of the caller's own connection fails
// every retry the same way: the default classifier ends the Source, and
// the error names the option to raise.
func ExampleIsReceiveTooLarge() {
	err := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (9437300 vs. 4194304)")
	f := source.Failure{Err: err, Code: status.Code(err), Attempt: 1}
	fmt.Println(source.IsReceiveTooLarge(err), source.DefaultClassifier(f))
	// Output: true false
}
