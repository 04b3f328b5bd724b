package publisher_test

import (
	"context"
	"fmt"
	"log"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pubsubflow/pubsubflow/publisher"
)

// Trace publishing: a "<topic> create" span per message, under the
// context given to Publish, and a "<topic> publish" span per RPC. The
// message carries its create span's context in googclient_traceparent, so
// a subscriber that traces (ours or Google's) continues the trace.
func ExampleConfig_tracerProvider() {
	srv, topic := server()
	defer srv.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))

	p, err := publisher.New(srv.ClientConn(), topic, publisher.Config{TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	ctx, span := tp.Tracer("app").Start(context.Background(), "checkout")
	p.Publish(ctx, &publisher.Message{Data: []byte("order 1")}).Get(ctx)
	span.End()
	p.Close()
	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name)
	}
	// Output:
	// publisher flow control
	// publisher batching
	// orders publish
	// orders create
	// checkout
}
