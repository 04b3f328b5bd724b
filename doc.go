// Package pubsubflow consumes and publishes Google Cloud Pub/Sub over gRPC
// StreamingPull as composable channel stages.
//
// A Subscriber composes, for one subscription, the stages that must be
// wired together to be correct: the StreamingPull source (restart wraps
// only the stream), EagerTrack (lease extension from the moment of
// receipt), FlowGate (flow-control permits from the moment of receipt), and
// the paired Acknowledge sink (one settle path releases permit and lease and
// sends the ack). Use it whole:
//
//	err := sub.Run(ctx, 8, func(ctx context.Context, m *pubsubflow.Message) error { ... })
//
// or compose your own stages between its ends:
//
//	err := pipeline.From(sub.Source()).Via(myStages...).To(sub.Acknowledge())
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
