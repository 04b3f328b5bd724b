//go:build tools

// Package deps pins the modules the project's packages share, so that
// go mod tidy keeps them while work lands package by package.
package deps

import (
	_ "cloud.google.com/go/pubsub/v2"
	_ "cloud.google.com/go/pubsub/v2/pstest"
	_ "github.com/googleapis/gax-go/v2"
	_ "github.com/reugn/go-streams"
	_ "github.com/schollz/progressbar/v3"
	_ "go.opentelemetry.io/otel/metric"
	_ "go.opentelemetry.io/otel/sdk/metric"
	_ "go.uber.org/goleak"
	_ "golang.org/x/oauth2/google"
	_ "golang.org/x/sync/semaphore"
	_ "gonum.org/v1/plot"
	_ "google.golang.org/grpc"
	_ "pgregory.net/rapid"
)
