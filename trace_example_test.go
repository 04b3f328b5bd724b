package pubsubflow_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pubsubflow/pubsubflow"
	"github.com/pubsubflow/pubsubflow/publisher"
	"github.com/pubsubflow/pubsubflow/pubsubtest"
)

// Trace a message from Publish to the handler: the publisher sends its
// create span's context in the message's attributes, the subscriber's
// subscribe span continues that trace, and the handler's ctx carries the
// process span under it.
func ExampleSubscriberConfig_tracerProvider() {
	srv, _ := pubsubtest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	topic, _ := srv.CreateTopic(ctx, "orders")
	subscription, _ := srv.CreateSubscription(ctx, pubsubtest.SubscriptionConfig{Name: "orders-worker", Topic: topic})

	tp := sdktrace.NewTracerProvider() // add an exporter to see the spans
	defer tp.Shutdown(ctx)

	pub, _ := publisher.New(srv.ClientConn(), topic, publisher.Config{TracerProvider: tp})
	reqCtx, request := tp.Tracer("app").Start(ctx, "handle request")
	pub.Publish(reqCtx, &publisher.Message{Data: []byte("order 1")}).Get(ctx)
	request.End()
	pub.Close()

	sub, err := pubsubflow.NewSubscriber(ctx, subscription,
		pubsubflow.SubscriberConfig{Conn: srv.ClientConn(), TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	sub.Run(runCtx, 1, func(ctx context.Context, m *pubsubflow.Message) error {
		span := trace.SpanContextFromContext(ctx)
		fmt.Println("same trace as the request:", span.TraceID() == request.SpanContext().TraceID())
		cancel()
		return nil
	})
	sub.Close()
	// Output: same trace as the request: true
}

// Read the publisher's trace context from a message yourself, for example
// in a stage of your own.
func ExampleMessageCarrier() {
	attrs := map[string]string{"googclient_traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	ctx := propagation.TraceContext{}.Extract(context.Background(), pubsubflow.MessageCarrier(attrs))
	sc := trace.SpanContextFromContext(ctx)
	fmt.Println(sc.TraceID(), sc.SpanID(), sc.IsRemote())
	// Output: 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 true
}
