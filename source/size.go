package source

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
)

// protoSize is the size flow control counts: the encoded PubsubMessage
// (data, attributes, ids, publish time), as the service counts it against
// a stream's max_outstanding_bytes, so the client's count and the
// server's agree.
func protoSize(rm *pubsubpb.ReceivedMessage) int { return proto.Size(rm.GetMessage()) }
