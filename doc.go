// Package pubsubflow consumes and publishes Google Cloud Pub/Sub over gRPC
// StreamingPull as composable channel stages.
//
// A Subscriber is the library's operators composed for the common case:
// source.Subscribe (StreamingPull, restart inside the source) with
// flow.EagerTrack (lease extension from the moment of receipt) and
// flow.FlowGate (the flow budget counted on receipt) fused into it, then
// your processing, then sink.Acknowledge. Each message carries its
// source's one settle path, which gives back its lease and permit and
// queues the ack, whatever ends it: nothing to pair. Use it whole:
//
//	err := sub.Run(ctx, 8, func(ctx context.Context, m *pubsubflow.Message) error { ... })
//
// or compose your own stages between its ends:
//
//	err := pipeline.From(sub.Source()).Via(myStages...).To(sub.Acknowledge())
//
// or build the chain yourself from the public operators (package source,
// flow, sink, operators), as the README's "Composing the operators
// yourself" shows; written in that order they compose just as the
// Subscriber does.
//
// Two clocks never share a goroutine: tracking happens on receipt, in
// microseconds; processing takes as long as it takes.
//
// With SubscriberConfig.TracerProvider set, every message is traced as
// Google's clients trace it (their "googclient_" trace context in the
// message's attributes, subscribe, process, ack, nack and modack spans),
// so a trace started by any official client's publisher continues through
// your handler, whose ctx carries the process span.
package pubsubflow
