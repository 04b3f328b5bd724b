package main

// external lists the names of other modules' APIs (Pub/Sub's RPCs and
// messages, gRPC's and the standard library's) that doc comments name
// bare.
var external = map[string]bool{
	// Units and products.
	"KiB": true, "MiB": true, "GiB": true, "W3C": true, "OpenTelemetry": true,
	"PostgreSQL": true, "BigQuery": true, "VmHWM": true,
	// Pub/Sub's protos and clients (pubsubpb, apiv1), and AIP-193.
	"PubsubMessage": true, "ReceivedMessage": true, "PublishRequest": true,
	"StreamingPullRequest": true, "ErrorInfo": true, "SubscriberClient": true,
	"PublisherClient": true, "NewPublisherClient": true,
	"CloudPubSubDeadLetterSourceDeliveryCount": true,
	// The standard library and protobuf.
	"WaitGroup": true, "MemStats": true, "ProtoReflect": true, "GetUnknown": true,
}
